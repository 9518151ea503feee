import type { ModelInfo } from './types';

/**
 * The model's state reaches the page two ways: model:state events, in the
 * order the service emits them, and the answers of calls (Models.Open,
 * Unload, Info), each the state as the call found it. An answer can be
 * read after an event newer than it: a small model's load ends, and its
 * "ready" event arrives, before Open's "loading" answer does. Taken as
 * it comes, that answer would leave the page waiting on a load that has
 * ended. So an answer counts only when no event arrived while its call was
 * in flight; where one did, the events carry the state (the service emits
 * every state its calls answer with).
 */
export class ModelStateFeed {
  private events = 0;

  /** event counts a model:state event and returns its state, to apply. */
  event(m: ModelInfo): ModelInfo {
    this.events++;
    return m;
  }

  /** mark is taken just before a call whose answer holds the model's state. */
  mark(): number {
    return this.events;
  }

  /** answer is the state to apply for an answer to a call made at mark: it, or cur where an event came since. */
  answer(mark: number, got: ModelInfo, cur: ModelInfo): ModelInfo {
    return this.events === mark ? got : cur;
  }
}

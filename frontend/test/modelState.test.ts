// The model's state from events and from calls' answers: an answer read
// after a newer event does not undo it (a small model's load ends before
// Open's "loading" answer is read: the page must show it ready).
import { describe, expect, it } from 'vitest';
import { ModelStateFeed } from '../src/modelState';
import type { ModelInfo } from '../src/types';

const none: ModelInfo = { state: 'none', random_weights: false, builtin: false };
const loading: ModelInfo = { state: 'loading', random_weights: false, builtin: false, name: 'gemma4-synthetic-tiny' };
const ready: ModelInfo = { ...loading, state: 'ready' };

/** Replays an order of arrivals on a page state, as main.ts applies them. */
function replay(order: Array<'call' | 'event-loading' | 'event-ready' | 'answer'>): ModelInfo {
  const feed = new ModelStateFeed();
  let cur = none;
  let mark = -1;
  for (const step of order) {
    if (step === 'call') mark = feed.mark();
    else if (step === 'event-loading') cur = feed.event(loading);
    else if (step === 'event-ready') cur = feed.event(ready);
    else cur = feed.answer(mark, loading, cur);
  }
  return cur;
}

describe('the model state from events and answers', () => {
  it.each([
    ['the answer before the events', ['call', 'answer', 'event-loading', 'event-ready'], 'ready'],
    ['the load ends before the answer is read', ['call', 'event-loading', 'event-ready', 'answer'], 'ready'],
    ['the loading event, then the answer, then ready', ['call', 'event-loading', 'answer', 'event-ready'], 'ready'],
    ['the answer alone (events not connected)', ['call', 'answer'], 'loading'],
    ['an event before the call does not block its answer', ['event-ready', 'call', 'answer'], 'loading'],
  ] as const)('%s', (_, order, want) => expect(replay([...order]).state).toBe(want));
});

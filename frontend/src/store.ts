// The page's state and a minimal change notification.
import type { LiveRun } from './run';
import type { SchemaDraft } from './schema';
import type {
  CameraState, InputFile, Limits, LogEntry, MediaAvailability, MediaItem, MediaLimits, ModelInfo, PlaybackState, Preferences,
  Preset, PromptPreview, RecordingState, RunRecord, SchemaCheck, SystemInfo,
} from './types';

export interface State {
  mode: 'desktop' | 'browser';
  booting: boolean;
  connected: boolean;
  system?: SystemInfo;
  model: ModelInfo;
  prefs?: Preferences;
  presets: Preset[];
  limits?: Limits;
  draft: SchemaDraft;
  schemaName: string;
  check?: SchemaCheck;
  input: string;
  files: InputFile[];
  /** The input's images, audio and video (the media service's, shared by every page). */
  media: MediaItem[];
  mediaLimits?: MediaLimits;
  mediaAvail?: MediaAvailability;
  /** The last refused media file or device error. */
  mediaError: string | null;
  camera: CameraState;
  cameraFrame: string | null;
  recording: RecordingState | null;
  playback: PlaybackState;
  /** The prompt the model would receive now: tokens against the limit. */
  preview?: PromptPreview;
  /** The run on screen: live, or one opened from the history. */
  run: LiveRun | null;
  /** The field names and types of the run on screen, in schema order. */
  runFields: { name: string; type: string }[];
  history: RunRecord[];
  baselineId: string | null;
  logs: LogEntry[];
  tab: 'history' | 'logs' | 'prompt' | 'dataset' | 'calibration';
}

export type Key = keyof State;

export class Store {
  private listeners: { keys: Set<Key>; fn: () => void }[] = [];
  private changed = new Set<Key>();
  private scheduled = false;

  constructor(public state: State) {}

  /** Changes state and notifies the listeners of the changed keys (batched per microtask). */
  set(patch: Partial<State>) {
    Object.assign(this.state, patch);
    for (const k of Object.keys(patch) as Key[]) this.changed.add(k);
    if (!this.scheduled) {
      this.scheduled = true;
      queueMicrotask(() => this.flush());
    }
  }

  /** Calls fn when any of keys changes. */
  on(keys: Key[], fn: () => void) {
    this.listeners.push({ keys: new Set(keys), fn });
  }

  flush() {
    this.scheduled = false;
    const changed = this.changed;
    this.changed = new Set();
    for (const l of this.listeners) {
      for (const k of changed) {
        if (l.keys.has(k)) {
          l.fn();
          break;
        }
      }
    }
  }
}

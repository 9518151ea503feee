// Typed calls to the Go services.
import { bytesOf } from './files';
import type { Transport } from './transport';
import type { DownloadState, HubRepo, LocalModel, TokenInfo } from './ui/modelsDialog';
import type {
  CalibrationReport, CameraState, InputFile, Limits, LogEntry, MediaAvailability, MediaItem, MediaLimits, MediaResult, ModelInfo,
  PlaybackState, Preferences, Preset, PromptPreview, RecordingState, RunRecord, RunRequest, RunStarted, SchemaCheck,
  SystemInfo, UploadResponse,
} from './types';

export class Api {
  constructor(readonly t: Transport) {}

  get mode() {
    return this.t.mode;
  }

  // Models
  modelInfo = () => this.t.call<ModelInfo>('Models', 'Info');
  openModel = (spec: string) => this.t.call<ModelInfo>('Models', 'Open', spec);
  unloadModel = () => this.t.call<ModelInfo>('Models', 'Unload');

  // Library: models on this computer, downloads from the Hugging Face Hub
  localModels = () => this.t.call<LocalModel[]>('Library', 'Local');
  hubRepos = () => this.t.call<HubRepo[]>('Library', 'Repos');
  hubToken = () => this.t.call<TokenInfo>('Library', 'Token');
  setHubToken = (token: string) => this.t.call<TokenInfo>('Library', 'SetToken', token);
  downloadState = () => this.t.call<DownloadState>('Library', 'State');
  download = (repo: string, revision = '') => this.t.call<DownloadState>('Library', 'Download', repo, revision);
  cancelDownload = () => this.t.call<DownloadState>('Library', 'Cancel');

  // Runs: both sides together, or one side alone
  startRun = (req: RunRequest) => this.t.call<RunStarted>('Runs', 'Start', req);
  startScorer = (req: RunRequest) => this.t.call<RunStarted>('Scorer', 'Start', req);
  startGenerator = (req: RunRequest) => this.t.call<RunStarted>('Generator', 'Start', req);
  cancelRun = (id: string, side: '' | 'scorer' | 'generator' = '') => this.t.call<void>('Runs', 'Cancel', id, side);
  currentRun = () => this.t.call<RunRecord | null>('Runs', 'Current');
  history = () => this.t.call<RunRecord[]>('Runs', 'History');
  deleteRun = (id: string) => this.t.call<void>('Runs', 'Delete', id);
  clearHistory = () => this.t.call<void>('Runs', 'ClearHistory');

  // Scorer
  checkSchema = (schema: unknown) => this.t.call<SchemaCheck>('Scorer', 'Check', schema);
  presets = () => this.t.call<Preset[]>('Scorer', 'Presets');
  limits = () => this.t.call<Limits>('Scorer', 'Limits');
  prompt = (schema: unknown, input: string, media: string[] = []) => this.t.call<PromptPreview>('Scorer', 'PromptMedia', schema, input, media);
  /** Runs the scorer side of a finished run again with another backend. */
  repeatScorer = (id: string, backend: string) => this.t.call<RunStarted>('Scorer', 'Repeat', id, backend);
  /** Scores labelled examples (JSONL) and reports their quality before and after fitted temperatures. */
  calibrationReport = (schema: unknown, examples: string, backend = '') =>
    this.t.call<CalibrationReport>('Scorer', 'CalibrationReport', { schema, examples, backend });

  // Settings
  settings = () => this.t.call<Preferences>('Settings', 'Get');
  saveSettings = (p: Preferences) => this.t.call<Preferences>('Settings', 'Set', p);
  defaultSettings = () => this.t.call<Preferences>('Settings', 'Defaults');

  // Logs
  logs = (after = 0, limit = 500) => this.t.call<LogEntry[]>('Logs', 'Entries', after, limit);
  setLogLevel = (level: string) => this.t.call<void>('Logs', 'SetLevel', level);
  clearLogs = () => this.t.call<void>('Logs', 'Clear');

  // System
  system = () => this.t.call<SystemInfo>('System', 'Info');
  frontendReady = (agent: string) => this.t.call<void>('System', 'FrontendReady', agent);
  frontendLog = (level: 'error' | 'warning', message: string) => this.t.call<void>('System', 'FrontendLog', level, message);
  chooseFiles = () => this.t.call<InputFile[]>('System', 'ChooseFiles');
  chooseModelFolder = () => this.t.call<string>('System', 'ChooseModelFolder');
  saveText = (name: string, content: string) => this.t.call<string>('System', 'SaveText', name, content);

  // Media: the input's images, audio and video, the camera, the microphone, the speaker
  mediaItems = () => this.t.call<MediaItem[]>('Media', 'Items');
  mediaLimits = () => this.t.call<MediaLimits>('Media', 'Limits');
  mediaAvailability = () => this.t.call<MediaAvailability>('Media', 'Availability');
  refreshMedia = () => this.t.call<MediaAvailability>('Media', 'Refresh');
  removeMedia = (id: string) => this.t.call<void>('Media', 'Remove', id);
  clearMedia = () => this.t.call<void>('Media', 'Clear');
  /** Adds a refused file in place of the items its offer named (MediaResult.replace). */
  replaceMedia = (pending: string) => this.t.call<MediaResult>('Media', 'Replace', pending);
  discardMedia = (pending: string) => this.t.call<void>('Media', 'Discard', pending);
  snapshot = (camera = '') => this.t.call<MediaResult>('Media', 'Snapshot', camera);
  startCamera = (camera = '') => this.t.call<CameraState>('Media', 'StartCamera', camera);
  stopCamera = () => this.t.call<CameraState>('Media', 'StopCamera');
  cameraState = () => this.t.call<CameraState>('Media', 'Camera');
  record = (seconds: number, mic = '') => this.t.call<RecordingState>('Media', 'Record', mic, seconds);
  stopRecording = () => this.t.call<RecordingState>('Media', 'StopRecording');
  recording = () => this.t.call<RecordingState>('Media', 'Recording');
  play = (id: string) => this.t.call<PlaybackState>('Media', 'Play', id);
  stopPlayback = () => this.t.call<PlaybackState>('Media', 'StopPlayback');

  /** Adds media files from the page: one multipart upload in the browser, base64 calls otherwise. */
  async upload(files: File[]): Promise<MediaResult[]> {
    if (!files.length) return [];
    if (this.t.upload) {
      const form = new FormData();
      for (const f of files) form.append('file', f, f.name);
      return ((await this.t.upload(form)) as UploadResponse).results;
    }
    const out: MediaResult[] = [];
    for (const f of files) out.push(await this.t.call<MediaResult>('Media', 'Upload', f.name, await base64(f)));
    return out;
  }
}

/** A file's bytes as base64 (Go's JSON for []byte). */
export async function base64(f: Blob): Promise<string> {
  const bytes = await bytesOf(f);
  let bin = '';
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}

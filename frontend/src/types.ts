// The JSON shapes of the Go services (package app and engine/scorer).

export type FieldType = 'choice' | 'independent' | 'bool' | 'score' | 'catalog';

export interface Modality {
  name: string;
  supported: boolean;
  note?: string;
}

export interface ModelInfo {
  state: 'none' | 'loading' | 'ready' | 'error';
  spec?: string;
  name?: string;
  path?: string;
  /** The ready model's decoder family: 'gemma3n' or 'gemma4' (ui/family.ts names it). */
  family?: string;
  random_weights: boolean;
  builtin: boolean;
  params?: number;
  size_bytes?: number;
  layers?: number;
  hidden_size?: number;
  vocab_size?: number;
  inputs?: Modality[];
  load_ms?: number;
  elapsed_ms?: number;
  stage?: string;
  /** Done of total units of the loading stage (weights packed, bytes checked). */
  done?: number;
  total?: number;
  error?: string;
  note?: string;
  /** The backend the model loads or runs on, and why (app.DeviceInfo). */
  device?: DeviceInfo;
  /** What the ready model keeps in the backend's memory (app.ResidentInfo). */
  resident?: ResidentInfo;
  /** The replicas of a model on several devices (serve --devices), one a
   * device, requests spread over them; device is then the first one's
   * (app.ReplicaInfo). Absent for one device. */
  replicas?: ReplicaInfo[];
}

export interface ReplicaInfo {
  device: DeviceInfo;
  /** False once its device failed (error says how): its requests ran again on the others. */
  up: boolean;
  error?: string;
  /** Requests it answered, and those it runs now. */
  requests: number;
  running: number;
}

/** A device setting: auto (the GPU when it opens, else the CPU), cpu, cuda or cuda:N. */
export type Device = 'auto' | 'cpu' | 'cuda' | `cuda:${number}`;

export interface DeviceInfo {
  requested: string;
  /** What runs the model: cpu or cuda. */
  backend: string;
  /** The CPU stands in for the GPU asked for; note says why. */
  fallback?: boolean;
  note?: string;
  /** The processor or the GPU. */
  name?: string;
  cores?: number;
  simd?: string;
  /** The GPU's memory (absent when the backend does not say). */
  memory_bytes?: number;
}

export interface ResidentInfo {
  weights: string;
  weight_bytes: number;
  /** The per-layer embedding table on the device (0: on the host). */
  ple_bytes?: number;
  kv_positions: number;
  kv_bytes: number;
  /** Towers loaded (vision, audio): each loads with its first input. */
  towers: string[];
}

export interface Candidate {
  value: string;
  probability: number;
  log_likelihood: number;
}

export interface Decision {
  name: string;
  candidates: Candidate[];
  confidence: number;
  allowed_token_mass: number;
  temperature: number;
  boundary?: string;
  /** What a scoring correction did (absent without one; scorer.Correction). */
  correction?: Correction;
}

/** A scoring correction of one decision: the distribution before it and the reference divided out. */
export interface Correction {
  method: 'contextual' | 'pmi';
  raw_probabilities: number[];
  raw_confidence: number;
  /** contextual: the mean distribution on the content-free inputs. */
  prior_probabilities?: number[];
  /** pmi: the candidates' log-likelihoods under the neutral premise. */
  neutral_log_likelihoods?: number[];
}

export interface LabelResult {
  label: string;
  p_yes: number;
  confidence: number;
  allowed_token_mass: number;
}

/** One legal token of a trie-decode step and its probability (scorer.TokenProb). */
export interface TokenProb {
  id: number;
  text?: string;
  p: number;
}

/** One step of a trie-constrained decode (scorer.CatalogStep): its legal tokens, most probable first. */
export interface CatalogStep {
  node: number;
  chosen: number;
  /** The size of the legal set at this step. */
  legal: number;
  tokens: TokenProb[];
}

/** A trie decode's time per token (scorer.CatalogTiming). */
export interface CatalogTiming {
  tokens: number;
  prefill_ms: number;
  ms_per_token: number;
  sparse_head_ms_per_token: number;
  dense_head_ms_per_token?: number;
  max_legal: number;
  dense_max_relative_gap?: number;
}

export interface FieldResult {
  name: string;
  type: FieldType;
  winner?: string;
  p_true?: number;
  labels?: LabelResult[];
  expected_level?: number;
  confidence: number;
  allowed_token_mass: number;
  decisions: Decision[];
  /** A trie decode's emitted entries in order (catalog fields; choice fields under the catalog backend). */
  names?: string[];
  steps?: CatalogStep[];
  path_probability?: number;
  catalog_timing?: CatalogTiming;
  elapsed_ms: number;
}

export interface SideTiming {
  start_ms: number;
  input_preparation_ms: number;
  prefill_ms: number;
  /** The prefill's speed over the tokens it computed (prompt_tokens less prefix_reused_tokens). */
  prefill_tokens_per_second: number;
  prompt_tokens: number;
  /** Leading prompt tokens taken from an earlier request's prefix instead of computed. */
  prefix_reused_tokens?: number;
  /** Live progress of a long prefill: decoder layers done of those it runs. */
  prefill_done?: number;
  prefill_layers?: number;
  first_token_ms?: number;
  first_decision_ms?: number;
  branch_batches_ms?: number[];
  decode_ms?: number;
  decode_tokens_per_second?: number;
  output_tokens?: number;
  total_ms: number;
}

export type SideStatus = 'preparing' | 'prefilling' | 'scoring' | 'decoding' | 'done' | 'cancelled' | 'error';

export interface ScorerSide {
  status: SideStatus;
  error?: string;
  fields: FieldResult[];
  fields_total: number;
  answer?: unknown;
  /** The answer before a scoring correction (absent without one). */
  raw_answer?: unknown;
  probability_source?: string;
  calibration: { applied: boolean; detail: string };
  note?: string;
  decisions?: number;
  branch_rows?: number;
  branch_batch?: number;
  cached_schema: boolean;
  timing: SideTiming;
}

export interface GeneratorSide {
  status: SideStatus;
  error?: string;
  text: string;
  stopped: boolean;
  prompt_mode: string;
  timing: SideTiming;
  parsed?: unknown;
  parse_error?: string;
}

export interface InputFile {
  name: string;
  path?: string;
  size: number;
  kind: 'text' | 'image' | 'audio' | 'video' | 'other';
  supported: boolean;
  reason?: string;
  text?: string;
  /** What became of a media file (the window adds them by path). */
  media?: MediaResult;
}

export type MediaKind = 'image' | 'audio' | 'video';

export interface Peak {
  min: number;
  max: number;
}

export interface FramePreview {
  ms: number;
  caption: string;
  url: string;
}

/** An image, audio clip or video of the input (app.MediaItem). */
export interface MediaItem {
  id: string;
  kind: MediaKind;
  name: string;
  source: 'file' | 'upload' | 'camera' | 'microphone';
  format?: string;
  bytes?: number;
  width?: number;
  height?: number;
  duration_ms?: number;
  tokens: number;
  thumb?: string;
  model_view?: string;
  frames?: FramePreview[];
  sound?: boolean;
  waveform?: Peak[];
  note?: string;
  added_ms: number;
  /** Its expected time in the loaded model's towers on this machine (absent with no model). */
  tower?: TowerEstimate;
}

/** An item's expected tower time, from the towers' speed measured in runs here (app.TowerEstimate). */
export interface TowerEstimate {
  ms: number;
  /** It went through the loaded model's towers already: its output is cached. */
  cached?: boolean;
  /** False while no run on this machine has timed its tower. */
  measured: boolean;
  /** Its tower is not loaded yet: the first item waits for the load too. */
  loads?: boolean;
  /** "CPU" or the GPU's name. */
  device: string;
  basis?: string;
}

export interface LimitInfo {
  limit: string;
  value: number;
  max: number;
  unit?: string;
  at_least?: boolean;
}

export interface MediaResult {
  name: string;
  item?: MediaItem;
  error?: string;
  limit?: LimitInfo;
  /** Refused only because items hold its place: Media.Replace(pending) adds it in their stead. */
  replace?: MediaReplace;
  /** The id of the item with the same content already in the input (not added twice). */
  duplicate?: string;
}

/** An offer to add a refused file in place of the items that hold its place (app.MediaReplace). */
export interface MediaReplace {
  pending: string;
  ids: string[];
  names: string[];
  why: string;
}

export interface MediaLimits {
  max_images: number;
  max_audio_ms: number;
  max_silent_video_ms: number;
  max_video_with_sound_ms: number;
  max_video_frames: number;
  video_fps: number;
  max_audio_sources: number;
  max_upload_bytes: number;
  image_tokens: number;
  audio_tokens: number;
  max_input_tokens: number;
  model_image_side: number;
  record_seconds: number[];
}

export interface Feature {
  available: boolean;
  reason?: string;
  /** The system's own message behind reason (e.g. ALSA's), shown on request. */
  detail?: string;
  devices?: string[];
}

export interface MediaAvailability {
  camera: Feature;
  microphone: Feature;
  speaker: Feature;
  video: Feature;
  drivers: 'hardware' | 'synthetic';
}

export interface CameraState {
  live: boolean;
  device?: string;
  seq: number;
  error?: string;
}

export interface CameraFrame {
  seq: number;
  url: string;
  width: number;
  height: number;
}

export interface RecordingState {
  recording: boolean;
  device?: string;
  recorded_ms: number;
  total_ms: number;
  stopped?: boolean;
  item?: MediaItem;
  error?: string;
  limit?: LimitInfo;
}

export interface PlaybackState {
  playing: boolean;
  id?: string;
  error?: string;
}

export interface UploadResponse {
  results: MediaResult[];
}

/** A run's media in its record. */
export interface MediaRef {
  id: string;
  kind: MediaKind;
  name: string;
  source: string;
  tokens: number;
  width?: number;
  height?: number;
  duration_ms?: number;
  frames?: number;
  sound?: boolean;
}

/** A run's media preparation: the towers run once for both sides. */
export interface RunMedia {
  status: SideStatus;
  done: number;
  total: number;
  stage?: string;
  images: number;
  audio: boolean;
  soft_tokens: number;
  tower_ms?: number;
  error?: string;
  note: string;
  /** The item in its tower: loading the tower, or block of blocks done, item_ms in, about left_ms to go. */
  loading?: boolean;
  block?: number;
  blocks?: number;
  item_ms?: number;
  /** The whole pass's time left, at a smoothed rate (0 or absent: not known yet). */
  left_ms?: number;
  /** Share of the whole pass's work done (0..1). */
  fraction?: number;
  /** The finished items with their tower time; cached ones came from the tower cache. */
  items?: RunMediaItem[];
}

export interface RunMediaItem {
  what: string;
  ms: number;
  cached: boolean;
}

export interface GenerationSettings {
  max_tokens: number;
  temperature: number;
  top_k: number;
  top_p: number;
  seed: number;
  prompt: 'schema' | 'chat';
}

export interface ScorerSettings {
  branch_batch: number;
  temperature: number;
  calibration?: string;
  /** json (candidate likelihoods; empty means json), cached (single-token answer codes), catalog (choice fields decoded through a trie too) or head (a trained decision head). */
  backend?: Backend;
  /** A scoring correction: none (or unset), contextual or pmi. */
  normalize?: Normalize;
  /** The decision head file of the head backend (set by the head's settings). */
  head?: string;
}

export type Backend = '' | 'json' | 'cached' | 'catalog' | 'head';
export type Normalize = '' | 'none' | 'contextual' | 'pmi';

/** One confidence bin of a reliability diagram (scorer.Bin). */
export interface ReliabilityBin {
  lo: number;
  hi: number;
  count: number;
  confidence: number;
  accuracy: number;
}

/** Quality figures at one temperature (scorer.Metrics); temperature 0: each field at its own. */
export interface QualityMetrics {
  temperature: number;
  accuracy: number;
  log_loss: number;
  brier: number;
  ece: number;
  bins: ReliabilityBin[];
}

export interface FieldQuality {
  field: string;
  decisions: number;
  before: QualityMetrics;
  after: QualityMetrics;
}

/** A calibration report (scorer.CalibrationReport). */
export interface CalibrationReport {
  calibration: { global_temperature: number; field_temperatures: Record<string, number>; examples: number; decisions: number };
  backend: string;
  overall: FieldQuality;
  fields: FieldQuality[];
  mistakes: { example: number; text: string; decision: string; predicted: string; label: string; confidence: number }[] | null;
}

export interface RunSettings {
  generation: GenerationSettings;
  scorer: ScorerSettings;
}

export interface Preferences {
  run: RunSettings;
  log_level: string;
  /** The compute device models load on (empty means auto). */
  device?: Device;
}

export interface RunRecord {
  id: string;
  started_ms: number;
  model: string;
  random_weights: boolean;
  input: { text: string; chars: number; files?: InputFile[]; media?: MediaRef[] };
  schema_name?: string;
  schema?: unknown;
  settings: RunSettings;
  concurrent: boolean;
  note?: string;
  media?: RunMedia;
  scorer?: ScorerSide;
  generator?: GeneratorSide;
  total_ms: number;
}

export interface RunStarted {
  id: string;
  started_ms: number;
  scorer: boolean;
  generator: boolean;
  concurrent: boolean;
  model: string;
  random_weights: boolean;
}

/** One trie-decode step as it happens (app.CatalogLive): the names emitted so far and the step. */
export interface CatalogLive {
  field: string;
  /** null before the first name is emitted. */
  names: string[] | null;
  step: CatalogStep;
}

export interface ScorerUpdate {
  status: SideStatus;
  error?: string;
  fields?: FieldResult[];
  /** The trie-decode steps chosen since the last update. */
  catalog?: CatalogLive[];
  done: number;
  total: number;
  timing?: SideTiming;
}

export interface GeneratorUpdate {
  status: SideStatus;
  error?: string;
  delta?: string;
  tokens: number;
  timing?: SideTiming;
}

export interface RunUpdate {
  id: string;
  elapsed_ms: number;
  scorer?: ScorerUpdate;
  generator?: GeneratorUpdate;
  media?: RunMedia;
}

export interface RunRequest {
  input: string;
  schema?: unknown;
  schema_name?: string;
  files?: InputFile[];
  /** Ids of the media items the run takes. */
  media?: string[];
  settings?: RunSettings;
}

export interface RunAnnounce {
  run: RunStarted;
  fields: { name: string; type: FieldType }[];
}

export interface SchemaCheck {
  ok: boolean;
  error?: string;
  field?: string;
  fields: number;
  decisions: number;
}

export interface Preset {
  id: string;
  name: string;
  description: string;
  sample: string;
  schema: unknown;
}

export interface Limits {
  max_fields: number;
  max_decisions: number;
  max_input_tokens: number;
  max_input_bytes: number;
}

export interface LogEntry {
  seq: number;
  time_ms: number;
  level: string;
  message: string;
  fields?: Record<string, string>;
}

export interface SystemInfo {
  mode: 'desktop' | 'browser';
  dialogs: boolean;
  os: string;
  arch: string;
  cores: number;
  go: string;
  settings_path: string;
}

export interface PromptPreview {
  text: string;
  tokens: number;
  media_tokens: number;
  images: number;
  audio: boolean;
  max_tokens: number;
}

// Event names (app/events.go).
export const Events = {
  model: 'model:state',
  runStarted: 'run:started',
  runUpdate: 'run:update',
  runDone: 'run:done',
  logEntries: 'log:entries',
  filesDropped: 'files:dropped',
  settings: 'settings:changed',
  media: 'media:changed',
  mediaAvailability: 'media:availability',
  cameraFrame: 'camera:frame',
  cameraState: 'camera:state',
  micState: 'mic:state',
  playback: 'playback:state',
} as const;

// Typed calls to the Go services.
import type { Transport } from './transport';
import type {
  InputFile, Limits, LogEntry, ModelInfo, Preferences, Preset, PromptPreview, RunRecord, RunRequest, RunStarted,
  SchemaCheck, SystemInfo,
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
  prompt = (schema: unknown, input: string) => this.t.call<PromptPreview>('Scorer', 'Prompt', schema, input);

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
}

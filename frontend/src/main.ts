// Verdict's page: the same code in the Wails window and in the browser mode.
import './style.css';
import { Api } from './api';
import { DatasetEvent, datasetApi } from './dataset';
import { composeInput, readFile, splitFiles } from './files';
import { budget, mediaRefusal, mergeItems, runProgress, towerForecast } from './media';
import { fmtMs } from './format';
import { applyUpdate, fromRecord, markStopping, running, startRun, stopping } from './run';
import { emptySchema, fromEngine, problems, toEngine, type SchemaDraft } from './schema';
import { inputKey, recordKey, staleness } from './stale';
import { ModelStateFeed } from './modelState';
import { Store, type State } from './store';
import { detectTransport } from './transport';
import {
  Events, type CameraFrame, type CameraState, type InputFile, type LogEntry, type MediaAvailability, type MediaItem, type MediaResult,
  type ModelInfo, type PlaybackState, type Preferences, type Preset, type RecordingState, type RunAnnounce, type RunRecord,
  type RunStarted, type RunUpdate,
} from './types';
import { DatasetPanel } from './ui/datasetPanel';
import { debounce, h, rafThrottle, replace } from './ui/dom';
import { GeneratorPanel } from './ui/generatorPanel';
import { HistoryPanel } from './ui/historyPanel';
import { BackendPicker } from './ui/backendPicker';
import { CalibrationPanel } from './ui/calibrationPanel';
import { backendChoices } from './backends';
import { InputPanel } from './ui/inputPanel';
import { LogsPanel } from './ui/logsPanel';
import { MediaPanel } from './ui/mediaPanel';
import { ModelBar } from './ui/modelBar';
import { SchemaEditor } from './ui/schemaEditor';
import { ScorerPanel } from './ui/scorerPanel';
import { SettingsDialog } from './ui/settingsDialog';
import { DownloadEvent, ModelsDialog, type DownloadState } from './ui/modelsDialog';
import { TimingPanel } from './ui/timingPanel';
import { errorText, setToastReporter, toast } from './ui/toast';

const LS = 'verdict.';
const load = <T>(k: string, def: T): T => {
  try {
    const v = localStorage.getItem(LS + k);
    return v == null ? def : (JSON.parse(v) as T);
  } catch {
    return def;
  }
};
const save = (k: string, v: unknown) => {
  try {
    localStorage.setItem(LS + k, JSON.stringify(v));
  } catch {
    /* storage full or disabled */
  }
};

const MAX_LOGS = 2000;

class App {
  api: Api;
  store: Store;
  /** Orders the model's state from events and calls' answers. */
  private modelFeed = new ModelStateFeed();
  private editor: SchemaEditor;
  private inputPanel: InputPanel;
  private mediaPanel: MediaPanel;
  private scorer: ScorerPanel;
  private gen: GeneratorPanel;
  private timing: TimingPanel;
  private historyPanel: HistoryPanel;
  private calibration: CalibrationPanel;
  private backendPicker: BackendPicker;
  private logsPanel: LogsPanel;
  private datasetPanel: DatasetPanel;
  private modelBar: ModelBar;
  private settings: SettingsDialog;
  private models: ModelsDialog;
  private promptBox = h('pre.prompt#prompt-text');
  private promptMeta = h('div.small.muted');
  private tabBodies: Record<State['tab'], HTMLElement>;
  private tabsNav = h('nav.tabs', { role: 'tablist' });
  private banner = h('div.banner#banner', { hidden: true });
  private conn = h('span.conn#connection');
  /** The input the results on screen were computed for (null: unknown). */
  private shownKey: string | null = null;
  private staleNote = h('div.stale-note#stale-note', { role: 'status', hidden: true });
  private sides = h('div.sides');
  private layout!: HTMLElement;
  private schemaPanel = h('aside.col-schema#schema-panel', { 'aria-label': 'Schema editor' });
  private schemaToggle = h('button.btn.small#schema-toggle', { type: 'button', title: 'Show or hide the schema editor', 'aria-controls': 'schema-panel',
    onclick: () => this.setSchemaOpen(this.schemaPanel.hidden, true) });

  constructor(root: HTMLElement) {
    const transport = detectTransport();
    this.api = new Api(transport);
    this.store = new Store({
      mode: transport.mode,
      booting: true,
      connected: transport.mode === 'desktop',
      model: { state: 'none', random_weights: false, builtin: false },
      presets: [],
      draft: load<SchemaDraft | null>('draft', null) ?? emptySchema(),
      schemaName: load('schemaName', ''),
      input: load('input', ''),
      files: [],
      media: [],
      mediaError: null,
      camera: { live: false, seq: 0 },
      cameraFrame: null,
      recording: null,
      playback: { playing: false },
      run: null,
      runFields: [],
      history: [],
      baselineId: load<string | null>('baseline', null),
      logs: [],
      tab: load<State['tab']>('tab', 'history'),
    });
    const s = this.store.state;

    this.modelBar = new ModelBar({
      model: () => s.model,
      mode: () => s.mode,
      availability: () => s.mediaAvail,
      loadBuiltin: () => this.openModel('builtin'),
      loadFolder: (p) => this.openModel(p),
      cancelLoad: async () => {
        try {
          const mark = this.modelFeed.mark();
          const m = await this.api.unloadModel();
          this.store.set({ model: this.modelFeed.answer(mark, m, this.store.state.model) });
        } catch (e) {
          toast(errorText(e), 'error');
        }
      },
      browseModels: () => void this.models.open(),
      chooseFolder: async () => {
        try {
          const p = await this.api.chooseModelFolder();
          if (p) this.openModel(p);
        } catch (e) {
          toast(errorText(e), 'error');
        }
      },
    });
    this.editor = new SchemaEditor({
      draft: () => s.draft,
      schemaName: () => s.schemaName,
      presets: () => s.presets,
      check: () => s.check,
      change: (d, name, _structural) => {
        this.store.set({ draft: d, schemaName: name, check: undefined });
        save('draft', d);
        save('schemaName', name);
        this.checkSchema();
      },
      loadPreset: (p) => this.applyPreset(p, true),
      exportText: (n, c) => this.exportText(n, c),
    });
    this.mediaPanel = new MediaPanel({
      items: () => s.media,
      limits: () => s.mediaLimits,
      availability: () => s.mediaAvail,
      camera: () => s.camera,
      cameraFrame: () => s.cameraFrame,
      recording: () => s.recording,
      playback: () => s.playback,
      preview: () => s.preview,
      error: () => s.mediaError,
      remove: (id) => this.mediaCall(() => this.api.removeMedia(id)),
      clear: () => this.mediaCall(() => this.api.clearMedia()),
      snapshot: () => this.mediaCall(async () => this.mediaResults([await this.api.snapshot()])),
      toggleCamera: () => this.mediaCall(async () => this.store.set({ camera: s.camera.live ? await this.api.stopCamera() : await this.api.startCamera() })),
      record: (sec) => this.mediaCall(async () => this.store.set({ recording: await this.api.record(sec) })),
      stopRecording: () => this.mediaCall(async () => this.store.set({ recording: await this.api.stopRecording() })),
      play: (id) => this.mediaCall(async () => this.store.set({ playback: await this.api.play(id) })),
      stopPlayback: () => this.mediaCall(async () => this.store.set({ playback: await this.api.stopPlayback() })),
      refresh: () => this.mediaCall(async () => this.store.set({ mediaAvail: await this.api.refreshMedia() })),
      replace: (pending) => this.mediaCall(async () => this.mediaResults([await this.api.replaceMedia(pending)])),
      discard: (pending) => this.mediaCall(() => this.api.discardMedia(pending)),
      mode: () => s.mode,
    });
    this.inputPanel = new InputPanel({
      input: () => s.input,
      files: () => s.files,
      setInput: (v) => {
        this.store.set({ input: v });
        save('input', v);
      },
      addFiles: (fs) => this.addFiles(fs),
      pickFiles: (fs) => this.pickFiles(fs),
      removeFile: (i) => this.store.set({ files: s.files.filter((_, j) => j !== i) }),
      mode: () => s.mode,
      chooseFiles: async () => {
        try {
          this.addFiles(await this.api.chooseFiles());
        } catch (e) {
          toast(errorText(e), 'error');
        }
      },
      canRun: () => this.canRun(),
      running: () => running(s.run),
      stopping: () => stopping(s.run),
      run: (w) => this.run(w),
      stop: () => this.stop(''),
      progress: () => runProgress(s.run),
      inputTokensHint: () => {
        const n = composeInput(s.input, s.files).length;
        const b = budget(s.media, s.mediaLimits, s.preview);
        const parts = [];
        if (n) parts.push(`${n.toLocaleString('en-US')} characters`);
        if (b.total != null) parts.push(`${b.total.toLocaleString('en-US')} / ${b.max.toLocaleString('en-US')} tokens`);
        const towers = towerForecast(s.media);
        if (towers && !towers.cached) parts.unshift(towers.short); // first: the hint may be cut at the end
        return parts.join(' · ');
      },
    });
    this.scorer = new ScorerPanel({ stop: (side) => this.stop(side), compactChanged: (c) => save('compact', c) }, load('compact', false));
    this.gen = new GeneratorPanel({ stop: (side) => this.stop(side) });
    this.timing = new TimingPanel();
    this.historyPanel = new HistoryPanel({
      history: () => s.history,
      baselineId: () => s.baselineId,
      currentId: () => s.run?.id ?? null,
      setBaseline: (id) => {
        this.store.set({ baselineId: id });
        save('baseline', id);
      },
      open: (id) => this.openRun(id),
      remove: async (id) => {
        try {
          await this.api.deleteRun(id);
          this.store.set({ history: s.history.filter((r) => r.id !== id) });
        } catch (e) {
          toast(errorText(e), 'error');
        }
      },
      clear: async () => {
        try {
          await this.api.clearHistory();
          this.store.set({ history: [], baselineId: null });
          save('baseline', null);
        } catch (e) {
          toast(errorText(e), 'error');
        }
      },
      exportText: (n, c) => this.exportText(n, c),
      backends: () => backendChoices(s.prefs?.run.scorer),
      repeat: (id, backend) => this.repeat(id, backend),
    });
    this.calibration = new CalibrationPanel({
      schema: () => toEngine(s.draft),
      ready: () => s.model?.state === 'ready' && !problems(s.draft).length,
      report: (examples, backend) => this.api.calibrationReport(toEngine(s.draft), examples, backend),
    });
    this.backendPicker = new BackendPicker(() => s.prefs?.run.scorer);
    this.logsPanel = new LogsPanel({
      logs: () => s.logs,
      level: () => s.prefs?.log_level ?? 'info',
      setLevel: async (l) => {
        try {
          await this.api.setLogLevel(l);
          if (s.prefs) this.store.set({ prefs: { ...s.prefs, log_level: l } });
        } catch (e) {
          toast(errorText(e), 'error');
        }
      },
      clear: async () => {
        await this.api.clearLogs().catch(() => undefined);
        this.store.set({ logs: [] });
      },
    });
    const ds = datasetApi(transport);
    this.datasetPanel = new DatasetPanel({
      ...ds,
      start: () => ds.start(toEngine(s.draft)),
      exportText: (n, c) => this.exportText(n, c),
      blocked: () => s.model.state !== 'ready' ? 'load a model first' : problems(s.draft).length ? 'fix the schema first' : null,
      // The browser mode's API takes 4 MB a call (the JSON-escaped text counts); the window 64 MB.
      maxBytes: () => (s.mode === 'browser' ? 3.5 : 64) * 1048576,
      error: (m) => toast(m, 'error'),
    });
    this.models = new ModelsDialog({
      local: () => this.api.localModels(),
      repos: () => this.api.hubRepos(),
      token: () => this.api.hubToken(),
      setToken: (tk) => this.api.setHubToken(tk),
      state: () => this.api.downloadState(),
      download: (repo) => this.api.download(repo),
      cancel: () => this.api.cancelDownload(),
      open: (spec) => this.openModel(spec),
    });
    this.settings = new SettingsDialog({
      prefs: () => s.prefs,
      save: async (p) => {
        const got = await this.api.saveSettings(p);
        this.store.set({ prefs: got });
      },
      defaults: () => this.api.defaultSettings(),
      settingsPath: () => s.system?.settings_path ?? '',
      device: () => s.model?.device,
    });

    this.schemaPanel.appendChild(this.editor.el);
    this.sides.append(this.scorer.el, this.gen.el);
    this.tabBodies = {
      history: this.historyPanel.el,
      calibration: this.calibration.el,
      logs: this.logsPanel.el,
      dataset: this.datasetPanel.el,
      prompt: h('div.prompt-tab', null,
        h('div.toolbar', null, h('button.btn.small', { type: 'button', onclick: () => this.refreshPrompt() }, 'Refresh'), this.promptMeta),
        this.promptBox),
    };

    root.replaceChildren(
      h('header.topbar', null,
        h('div.brand', null, h('img', { src: './appicon.png', alt: '', width: 24, height: 24 }), h('span', null, 'Verdict')),
        this.modelBar.el,
        h('div.top-actions', null,
          this.conn,
          h('button.btn.small#open-settings', { type: 'button', title: 'Settings (Ctrl+,)', onclick: () => this.settings.open() }, '⚙ Settings'))),
      this.layout = h('main.layout', null,
        h('div.col-main', null,
          this.inputPanel.el,
          h('div.run-bar#run-bar', null, this.inputPanel.actions, this.backendPicker.el, this.schemaToggle),
          h('section.card.media-card', { 'aria-label': 'Media' }, this.mediaPanel.el),
          this.banner,
          this.staleNote,
          this.sides,
          this.timing.el,
          h('section.card.bottom', null, this.tabsNav, h('div.tab-body#tab-body'))),
        this.schemaPanel),
      this.settings.el,
      this.models.el);

    this.setSchemaOpen(load<boolean | null>('schemaOpen', null) ?? window.innerWidth >= 1400, false);
    this.wire();
    this.keyboard();
    this.render();
  }

  private render() {
    this.modelBar.render();
    this.editor.renderPresets();
    this.editor.render();
    this.inputPanel.render();
    this.mediaPanel.render();
    this.renderRun();
    this.renderTabs();
    this.renderConn();
  }

  private wire() {
    const s = this.store.state;
    const st = this.store;
    st.on(['model'], () => {
      this.modelBar.render();
      this.inputPanel.render();
      this.renderBanner();
      if (s.model.state === 'ready' || s.model.state === 'none') this.refreshMedia();
    });
    st.on(['media', 'mediaAvail', 'mediaLimits', 'mediaError', 'camera', 'recording', 'playback', 'preview'], () => {
      this.mediaPanel.render();
      this.inputPanel.render();
    });
    st.on(['mediaAvail'], () => this.modelBar.render());
    st.on(['cameraFrame'], () => this.mediaPanel.frame(s.cameraFrame));
    st.on(['input', 'files', 'media', 'draft'], () => this.refreshPreview());
    st.on(['presets'], () => this.editor.renderPresets());
    st.on(['check'], () => this.editor.renderStatus());
    st.on(['input', 'files', 'check', 'draft', 'booting'], () => this.inputPanel.render());
    // A run sends many updates a second: draw at most once per frame, and
    // touch the run bar only when the run's state changes.
    st.on(['run', 'runFields'], this.scheduleRun);
    st.on(['history', 'baselineId'], () => s.tab === 'history' && this.historyPanel.render());
    st.on(['history'], () => this.renderTabCount());
    st.on(['logs', 'prefs'], () => s.tab === 'logs' && this.logsPanel.render());
    st.on(['tab'], () => this.renderTabs());
    st.on(['prefs'], () => this.backendPicker.render());
    st.on(['model', 'draft'], () => s.tab === 'calibration' && this.calibration.render());
    st.on(['input', 'files', 'media', 'draft'], () => this.renderStale());
    st.on(['connected'], () => this.renderConn());
    st.on(['model', 'draft'], () => this.datasetPanel.renderControls());

    const t = this.api.t;
    t.on(Events.model, (m: ModelInfo) => st.set({ model: this.modelFeed.event(m) }));
    t.on(DatasetEvent, (d) => this.datasetPanel.update(d));
    t.on(Events.runStarted, (a: RunAnnounce) => {
      // A run started here, in another page or by the window itself.
      if (s.run?.id !== a.run.id) {
        this.shownKey = null;
        st.set({ run: startRun(a.run), runFields: a.fields });
      }
    });
    t.on(Events.runUpdate, (u: RunUpdate) => {
      if (s.run && s.run.id === u.id) st.set({ run: applyUpdate(s.run, u) });
    });
    t.on(Events.runDone, (rec: RunRecord) => {
      const history = s.history.filter((r) => r.id !== rec.id).concat(rec);
      const patch: Partial<State> = { history };
      if (s.run?.id === rec.id) {
        patch.run = fromRecord(rec);
        this.shownKey = recordKey(rec);
      }
      st.set(patch);
      if (s.run?.id === rec.id) this.announceDone(rec);
    });
    t.on(Events.logEntries, (es: LogEntry[]) => {
      const last = s.logs.length ? s.logs[s.logs.length - 1].seq : 0;
      const logs = s.logs.concat(es.filter((e) => e.seq > last));
      st.set({ logs: logs.length > MAX_LOGS ? logs.slice(logs.length - MAX_LOGS) : logs });
    });
    t.on(Events.filesDropped, (fs: InputFile[]) => this.addFiles(fs));
    t.on(Events.media, (items: MediaItem[]) => st.set({ media: items }));
    t.on(Events.mediaAvailability, (a: MediaAvailability) => st.set({ mediaAvail: a }));
    t.on(Events.cameraFrame, (f: CameraFrame) => st.set({ cameraFrame: f.url }));
    t.on(Events.cameraState, (c: CameraState) => {
      st.set({ camera: c, cameraFrame: c.live ? s.cameraFrame : null });
      if (c.error) toast(`Camera: ${c.error}`, 'error');
    });
    t.on(Events.micState, (r: RecordingState) => {
      const was = s.recording?.recording;
      st.set({ recording: r });
      if (was && !r.recording) {
        if (r.item) {
          st.set({ mediaError: null, media: mergeItems(s.media.filter((m) => m.kind !== 'audio'), [r.item]) });
          toast(`Recorded ${(r.recorded_ms / 1000).toFixed(1)} s from ${r.device ?? 'the microphone'}: it is the input audio`, 'ok');
        } else if (r.error) {
          st.set({ mediaError: `Recording: ${r.error}` });
        }
      }
    });
    t.on(Events.playback, (p: PlaybackState) => {
      st.set({ playback: p });
      if (p.error) toast(p.error, 'error');
    });
    t.on(Events.settings, (p: Preferences) => st.set({ prefs: p }));
    t.on(DownloadEvent, (d: DownloadState) => this.models.update(d));
    t.onConnection((c) => {
      const was = s.connected;
      st.set({ connected: c });
      if (c && !was && !s.booting) this.sync(); // reconnected: catch up
    });
    this.boot();
  }

  private async boot() {
    const s = this.store.state;
    try {
      const mark = this.modelFeed.mark();
      const [system, prefs, presets, limits, got, history, logs, media, mediaLimits, camera, recording] = await Promise.all([
        this.api.system(), this.api.settings(), this.api.presets(), this.api.limits(), this.api.modelInfo(), this.api.history(), this.api.logs(0, 500),
        this.api.mediaItems(), this.api.mediaLimits(), this.api.cameraState(), this.api.recording(),
      ]);
      const model = this.modelFeed.answer(mark, got, s.model);
      this.store.set({ system, prefs, presets, limits, model, history, logs, media, mediaLimits, camera, recording, booting: false });
      // Looking for devices may take a moment: the page does not wait for it.
      this.api.mediaAvailability().then((a) => this.store.set({ mediaAvail: a })).catch((e) => toast(`Media devices: ${errorText(e)}`, 'error'));
      if (!s.draft.fields.length && presets.length) this.applyPreset(presets[0], !s.input.trim());
      else this.checkSchema();
      const cur = await this.api.currentRun();
      if (cur) this.adoptRun(cur);
      datasetApi(this.api.t).state().then((d) => this.datasetPanel.update(d)).catch(() => undefined);
      this.render();
      this.api.frontendReady(navigator.userAgent).catch(() => undefined);
    } catch (e) {
      this.store.set({ booting: false });
      toast(`Cannot reach the Verdict service: ${errorText(e)}`, 'error');
    }
  }

  /** After a reconnection: model, history and the run in progress. */
  private async sync() {
    try {
      const mark = this.modelFeed.mark();
      const [got, history, cur, media, camera, recording] = await Promise.all([
        this.api.modelInfo(), this.api.history(), this.api.currentRun(), this.api.mediaItems(), this.api.cameraState(), this.api.recording(),
      ]);
      const model = this.modelFeed.answer(mark, got, this.store.state.model);
      this.store.set({ model, history, media, camera, recording });
      const s = this.store.state;
      if (s.run && !s.run.record) {
        const done = history.find((r) => r.id === s.run!.id);
        if (done) this.store.set({ run: fromRecord(done) });
      }
      if (cur) this.adoptRun(cur);
    } catch {
      /* the next reconnection retries */
    }
  }

  /** Shows a run that is already in progress (the page was opened during it). */
  private adoptRun(cur: RunRecord) {
    const live = fromRecord(cur);
    live.record = undefined;
    this.shownKey = recordKey(cur);
    this.store.set({ run: live, runFields: fieldsOf(cur.schema) });
  }

  private applyPreset(p: Preset, withSample: boolean) {
    try {
      const d = fromEngine(p.schema);
      this.store.set({ draft: d, schemaName: p.id, check: undefined });
      save('draft', d);
      save('schemaName', p.id);
      if (withSample) {
        this.store.set({ input: p.sample, files: [] });
        save('input', p.sample);
        this.inputPanel.setText(p.sample);
      }
      this.editor.render();
      this.editor.renderPresets();
      this.checkSchema();
    } catch (e) {
      toast(errorText(e), 'error');
    }
  }

  private checkSchema = debounce(async () => {
    const d = this.store.state.draft;
    if (problems(d).length) return this.editor.renderStatus();
    try {
      const c = await this.api.checkSchema(toEngine(d));
      if (this.store.state.draft === d) this.store.set({ check: c });
    } catch (e) {
      toast(errorText(e), 'error');
    }
  }, 250);

  /** Files from the window (dialog or drop): text files carry their text, media files what became of them. */
  private addFiles(fs: InputFile[]) {
    if (!fs.length) return;
    const media = fs.filter((f) => f.media).map((f) => f.media!);
    const rest = fs.filter((f) => !f.media);
    if (media.length) this.mediaResults(media);
    if (!rest.length) return;
    this.store.set({ files: this.store.state.files.concat(rest) });
    const bad = rest.filter((f) => !f.supported);
    if (bad.length) toast(`${bad.map((f) => f.name).join(', ')}: ${bad[0].reason}`, 'info', 6000);
  }

  /** Files picked or dropped in the browser: text is read here, media are uploaded. */
  private async pickFiles(files: File[]) {
    const { text, media } = splitFiles(files);
    if (text.length) this.addFiles(await Promise.all(text.map(readFile)));
    if (!media.length) return;
    const big = this.store.state.mediaLimits?.max_upload_bytes ?? Infinity;
    const total = media.reduce((n, f) => n + f.size, 0);
    if (total > big) {
      this.store.set({ mediaError: `These files are ${(total / 1e6).toFixed(1)} MB together, over the upload limit of ${Math.round(big / (1 << 20))} MB: add fewer at a time.` });
      return;
    }
    try {
      this.mediaResults(await this.api.upload(media));
    } catch (e) {
      this.store.set({ mediaError: errorText(e) });
      toast(errorText(e), 'error');
    }
  }

  /** Shows what became of added media: new items, and the first refusal with its reason. */
  private mediaResults(rs: MediaResult[]) {
    const s = this.store.state;
    const added = rs.filter((r) => r.item).map((r) => r.item!);
    // A refusal that a replace would undo is offered in the media panel instead.
    this.mediaPanel.offer(rs);
    const bad = rs.filter((r) => r.error && !r.replace);
    const patch: Partial<State> = { media: mergeItems(s.media, added) };
    if (bad.length) {
      const lines = bad.map((r) => r.error!);
      patch.mediaError = lines.join('\n');
      toast(bad.length === 1 ? lines[0] : `${bad.length} files were not added: ${lines[0]}…`, bad.some((r) => r.limit) ? 'error' : 'info', 8000);
    } else if (added.length || rs.some((r) => r.replace)) {
      patch.mediaError = null;
    }
    this.store.set(patch);
  }

  /** Runs a media call, showing its error. */
  private async mediaCall(f: () => Promise<unknown>) {
    try {
      await f();
    } catch (e) {
      this.store.set({ mediaError: errorText(e) });
    }
  }

  private async refreshMedia() {
    try {
      const [media, mediaLimits] = await Promise.all([this.api.mediaItems(), this.api.mediaLimits()]);
      this.store.set({ media, mediaLimits });
      this.refreshPreview();
    } catch {
      /* the next event brings them */
    }
  }

  /** Counts the prompt's tokens for the input, the media and the schema (debounced). */
  private refreshPreview = debounce(async () => {
    const s = this.store.state;
    if (s.booting || problems(s.draft).length) return;
    const input = composeInput(s.input, s.files);
    const ids = s.media.map((m) => m.id);
    try {
      const p = await this.api.prompt(toEngine(s.draft), input, ids);
      if (this.store.state.media.map((m) => m.id).join() === ids.join()) this.store.set({ preview: p });
    } catch {
      this.store.set({ preview: undefined });
    }
  }, 400);

  private async openModel(spec: string) {
    try {
      const mark = this.modelFeed.mark();
      const m = await this.api.openModel(spec);
      this.store.set({ model: this.modelFeed.answer(mark, m, this.store.state.model) });
    } catch (e) {
      toast(errorText(e), 'error');
    }
  }

  private canRun(): { ok: boolean; why: string } {
    const s = this.store.state;
    if (s.booting) return { ok: false, why: 'connecting…' };
    if (s.model.state === 'loading') return { ok: false, why: 'waiting for the model to load' };
    if (s.model.state !== 'ready') return { ok: false, why: 'load a model first' };
    if (!composeInput(s.input, s.files).trim() && !s.media.length) return { ok: false, why: 'type or drop some input' };
    if (s.recording?.recording) return { ok: false, why: 'wait for the recording to finish' };
    if (s.preview && s.preview.tokens > s.preview.max_tokens) {
      return { ok: false, why: `the prompt is ${s.preview.tokens.toLocaleString('en-US')} tokens, over the limit of ${s.preview.max_tokens.toLocaleString('en-US')}: remove some media or text` };
    }
    const refused = mediaRefusal(s.media, s.model);
    if (refused) return { ok: false, why: refused };
    const p = problems(s.draft);
    if (p.length) return { ok: false, why: `fix the schema: ${p[0].message}` };
    if (s.check && !s.check.ok) return { ok: false, why: `fix the schema: ${s.check.error}` };
    return { ok: true, why: '' };
  }

  private async run(which: 'both' | 'scorer' | 'generator') {
    const s = this.store.state;
    const can = this.canRun();
    if (!can.ok) {
      toast(can.why, 'info');
      return;
    }
    if (running(s.run)) return;
    const schema = toEngine(s.draft);
    const req = {
      input: composeInput(s.input, s.files),
      schema,
      schema_name: s.schemaName || undefined,
      files: s.files.map(({ text: _t, ...meta }) => meta),
      media: s.media.map((m) => m.id),
      settings: which === 'generator' ? undefined : this.backendPicker.override(s.prefs?.run),
    };
    try {
      const start = which === 'both' ? this.api.startRun : which === 'scorer' ? this.api.startScorer : this.api.startGenerator;
      const started: RunStarted = await start(req);
      // run:started may have arrived first, with updates after it: keep those.
      if (s.run?.id !== started.id) this.store.set({ run: startRun(started), runFields: s.draft.fields.map((f) => ({ name: f.name, type: f.type })) });
      this.shownKey = inputKey(req.input, req.media, schema);
    } catch (e) {
      toast(errorText(e), 'error');
    }
  }

  private async stop(side: '' | 'scorer' | 'generator') {
    const r = this.store.state.run;
    if (!r || !running(r)) return;
    // Stopping both sides shows "Stopping…" until run:done confirms the end.
    if (side === '') this.store.set({ run: markStopping(r) });
    try {
      await this.api.cancelRun(r.id, side);
    } catch (e) {
      const cur = this.store.state.run;
      if (side === '' && cur?.id === r.id && cur.stopping) this.store.set({ run: { ...cur, stopping: false } });
      toast(errorText(e), 'error');
    }
  }

  /** Runs the scorer side of finished run id again with another backend. */
  private async repeat(id: string, backend: string) {
    const s = this.store.state;
    if (running(s.run)) {
      toast('a run is in progress: wait for it to finish', 'info');
      return;
    }
    const rec = s.history.find((r) => r.id === id);
    try {
      const started = await this.api.repeatScorer(id, backend);
      if (this.store.state.run?.id !== started.id) this.store.set({ run: startRun(started), runFields: fieldsOf(rec?.schema) });
    } catch (e) {
      toast(errorText(e), 'error');
    }
  }

  private openRun(id: string) {
    const rec = this.store.state.history.find((r) => r.id === id);
    if (!rec || running(this.store.state.run)) return;
    this.shownKey = recordKey(rec);
    this.store.set({ run: fromRecord(rec), runFields: fieldsOf(rec.schema) });
    document.getElementById('scorer-panel')?.scrollIntoView({ behavior: 'smooth', block: 'start' });
  }

  private announceDone(rec: RunRecord) {
    const parts = [];
    if (rec.scorer) parts.push(`scorer ${rec.scorer.status} in ${fmtMs(rec.scorer.timing.total_ms)}`);
    if (rec.generator) parts.push(`generation ${rec.generator.status} in ${fmtMs(rec.generator.timing.total_ms)}`);
    toast(`${rec.id}: ${parts.join(', ')}`, rec.scorer?.status === 'error' || rec.generator?.status === 'error' ? 'error' : 'ok');
  }

  private async exportText(name: string, content: string) {
    if (this.store.state.mode === 'desktop') {
      try {
        const p = await this.api.saveText(name, content);
        if (p) toast(`Saved ${p}`, 'ok');
      } catch (e) {
        toast(errorText(e), 'error');
      }
      return;
    }
    const type = name.endsWith('.csv') ? 'text/csv' : 'application/json';
    const url = URL.createObjectURL(new Blob([content], { type }));
    const a = h('a', { href: url, download: name, hidden: true });
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  private scheduleRun = rafThrottle(() => this.renderRun());
  private shownRunKey = '';

  private renderRun() {
    const s = this.store.state;
    this.scorer.render(s.run, s.runFields);
    this.gen.render(s.run, s.runFields.map((f) => f.name));
    this.timing.render(s.run);
    this.inputPanel.renderProgress();
    const r = s.run;
    const key = r ? `${r.id}:${!!r.record}:${r.scorer?.status}:${r.generator?.status}` : '';
    if (key !== this.shownRunKey) {
      this.shownRunKey = key;
      this.renderBanner();
      this.renderStale();
      this.inputPanel.render();
      if (s.tab === 'history') this.historyPanel.render();
    }
  }

  /** Marks the results stale when the input, media or schema changed since their run. */
  private renderStale() {
    const s = this.store.state;
    let why = '';
    if (s.run && !s.booting) {
      try {
        why = staleness(this.shownKey, inputKey(composeInput(s.input, s.files), s.media.map((m) => m.id), toEngine(s.draft)));
      } catch {
        why = '';
      }
    }
    this.staleNote.hidden = !why;
    this.staleNote.textContent = why;
    this.sides.classList.toggle('stale', !!why);
    this.timing.el.classList.toggle('stale', !!why);
  }

  private renderBanner() {
    const s = this.store.state;
    const rw = s.run ? s.run.randomWeights : s.model.state === 'ready' && s.model.random_weights;
    this.banner.hidden = !rw;
    this.banner.title = rw ? 'Built-in model, random weights. Its distributions and its text are noise, not judgements: it exercises the whole pipeline. Open a Gemma 3n or Gemma 4 folder for real answers.' : '';
    if (rw) {
      replace(this.banner, h('b', null, 'Built-in model, random weights.'),
        ' Its distributions and its text are noise, not judgements: it exercises the whole pipeline. Open a Gemma 3n or Gemma 4 folder for real answers.');
    }
  }

  /** Opens or closes the schema editor's side panel (remembered once chosen). */
  private setSchemaOpen(open: boolean, remember: boolean) {
    this.schemaPanel.hidden = !open;
    this.layout.classList.toggle('schema-open', open);
    this.schemaToggle.setAttribute('aria-expanded', String(open));
    this.schemaToggle.textContent = open ? 'Schema ▸ hide' : '◂ Schema';
    if (remember) save('schemaOpen', open);
  }

  private renderTabs() {
    const s = this.store.state;
    const tabs: [State['tab'], string][] = [['history', 'History'], ['logs', 'Logs'], ['prompt', 'Prompt'], ['dataset', 'Dataset'], ['calibration', 'Calibration']];
    replace(this.tabsNav, tabs.map(([k, label], i) =>
      h('button.tab', { type: 'button', role: 'tab', id: `tab-${k}`, 'aria-selected': String(s.tab === k), title: `${label} (Alt+${i + 1})`,
        onclick: () => this.setTab(k) }, label, k === 'history' && s.history.length ? h('span.count', null, String(s.history.length)) : null)));
    const body = document.getElementById('tab-body');
    if (body) replace(body, this.tabBodies[s.tab]);
    if (s.tab === 'history') this.historyPanel.render();
    if (s.tab === 'logs') this.logsPanel.render();
    if (s.tab === 'prompt') this.refreshPrompt();
    if (s.tab === 'calibration') this.calibration.render();
  }

  /** The number of runs on the History tab. */
  private renderTabCount() {
    const n = this.store.state.history.length;
    const tab = this.tabsNav.querySelector('#tab-history');
    if (!tab) return;
    tab.querySelector('.count')?.remove();
    if (n) tab.appendChild(h('span.count', null, String(n)));
  }

  private setTab(t: State['tab']) {
    this.store.set({ tab: t });
    save('tab', t);
  }

  private async refreshPrompt() {
    const s = this.store.state;
    const input = composeInput(s.input, s.files);
    if (problems(s.draft).length) {
      this.promptBox.textContent = '';
      this.promptMeta.textContent = 'Fix the schema to see the prompt.';
      return;
    }
    try {
      const p = await this.api.prompt(toEngine(s.draft), input || (s.media.length ? '' : '(input)'), s.media.map((m) => m.id));
      this.promptBox.textContent = p.text;
      const media = p.media_tokens ? ` (media ${p.media_tokens.toLocaleString('en-US')}: each <image N> stands for ${s.mediaLimits?.image_tokens ?? 256} soft tokens, <audio> for ${s.mediaLimits?.audio_tokens ?? 188})` : '';
      this.promptMeta.textContent = `The shared prefix the scorer computes once (and the generator reads in schema mode)${p.tokens ? ` · ${p.tokens.toLocaleString('en-US')} tokens of ${(p.max_tokens || 8192).toLocaleString('en-US')}${media}` : ''}.`;
    } catch (e) {
      this.promptMeta.textContent = errorText(e);
    }
  }

  private renderConn() {
    const s = this.store.state;
    this.conn.className = `conn ${s.connected ? 'on' : 'off'}`;
    this.conn.textContent = s.mode === 'desktop' ? 'desktop' : s.connected ? 'browser · live' : 'browser · reconnecting…';
    this.conn.title = s.mode === 'desktop' ? 'Running in the Verdict window' : 'Running in a browser against verdict serve';
  }

  private keyboard() {
    document.addEventListener('keydown', (e) => {
      const s = this.store.state;
      if ((e.ctrlKey || e.metaKey) && e.key === 'Enter') {
        e.preventDefault();
        this.run(e.shiftKey ? 'scorer' : 'both');
      } else if (e.key === 'Escape' && running(s.run)) {
        e.preventDefault();
        this.stop('');
      } else if ((e.ctrlKey || e.metaKey) && e.key === ',') {
        e.preventDefault();
        this.settings.open();
      } else if (e.altKey && ['1', '2', '3', '4', '5'].includes(e.key)) {
        e.preventDefault();
        this.setTab((['history', 'logs', 'prompt', 'dataset', 'calibration'] as const)[Number(e.key) - 1]);
      }
    });
  }
}

function fieldsOf(schema: unknown): { name: string; type: string }[] {
  try {
    return fromEngine(schema).fields.map((f) => ({ name: f.name, type: f.type }));
  } catch {
    return [];
  }
}

const root = document.getElementById('app');
if (root) {
  const app = new App(root);
  (window as unknown as { verdict: App }).verdict = app;
  // Errors nobody handled go to the Go log (the log viewer, and the window's start-up check).
  const report = (msg: string) => app.api.frontendLog('error', msg).catch(() => undefined);
  setToastReporter((msg) => app.api.frontendLog('warning', msg).catch(() => undefined));
  window.addEventListener('error', (e) => report(`${e.message} (${e.filename}:${e.lineno})`));
  window.addEventListener('unhandledrejection', (e) => report(`unhandled rejection: ${errorText(e.reason)}`));
}
// Dropping a file outside the drop zone must not navigate away from the app.
document.addEventListener('dragover', (e) => e.preventDefault());
document.addEventListener('drop', (e) => e.preventDefault());

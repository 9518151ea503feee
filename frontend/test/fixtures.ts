import type { FieldResult, RunRecord } from '../src/types';

export const ticketSchema = {
  instructions: 'Read the support ticket and answer every field in JSON.',
  input_label: 'Ticket',
  fields: [
    { name: 'priority', question: 'How urgent is this ticket?', type: 'choice', options: ['low', 'medium', 'high', 'critical'] },
    { name: 'refund_requested', question: 'Does the customer ask for a refund?', type: 'bool' },
    { name: 'issues', question: 'Which problems are mentioned?', type: 'independent', labels: ['late delivery', 'damaged item'] },
    { name: 'anger', question: 'How angry?', type: 'score', levels: ['1', '2', '3'] },
  ],
};

const dec = (name: string, probs: [string, number][]) => ({
  name,
  candidates: probs.map(([value, probability]) => ({ value, probability, log_likelihood: Math.log(probability) })),
  confidence: 0.4,
  allowed_token_mass: 0.9,
  temperature: 1,
});

export const fields: FieldResult[] = [
  { name: 'priority', type: 'choice', winner: 'high', confidence: 0.4, allowed_token_mass: 0.9, elapsed_ms: 120,
    decisions: [dec('priority', [['low', 0.1], ['medium', 0.2], ['high', 0.6], ['critical', 0.1]])] },
  { name: 'refund_requested', type: 'bool', p_true: 0.8, confidence: 0.3, allowed_token_mass: 0.7, elapsed_ms: 100,
    decisions: [dec('refund_requested', [['true', 0.8], ['false', 0.2]])] },
  { name: 'issues', type: 'independent', confidence: 0.2, allowed_token_mass: 0.5, elapsed_ms: 130,
    labels: [{ label: 'late delivery', p_yes: 0.9, confidence: 0.5, allowed_token_mass: 0.6 }, { label: 'damaged item', p_yes: 0.3, confidence: 0.1, allowed_token_mass: 0.5 }],
    decisions: [dec('issues.late delivery', [['true', 0.9], ['false', 0.1]]), dec('issues.damaged item', [['true', 0.3], ['false', 0.7]])] },
  { name: 'anger', type: 'score', winner: '3', expected_level: 2.5, confidence: 0.1, allowed_token_mass: 0.8, elapsed_ms: 140,
    decisions: [dec('anger', [['1', 0.2], ['2', 0.1], ['3', 0.7]])] },
];

export function record(id: string, over: Partial<RunRecord> = {}, timing: { total?: number; decode?: number } = {}): RunRecord {
  return {
    id,
    started_ms: Date.UTC(2026, 10, 29, 14, 3, 27),
    model: 'built-in tiny Gemma 3n (random weights)',
    random_weights: true,
    input: { text: 'My parcel is late, "urgent", please refund', chars: 42 },
    schema_name: 'ticket',
    schema: ticketSchema,
    settings: { generation: { max_tokens: 32, temperature: 0, top_k: 64, top_p: 0.95, seed: 0, prompt: 'schema' }, scorer: { branch_batch: 8, temperature: 1 } },
    concurrent: true,
    scorer: {
      status: 'done', fields, fields_total: 4, answer: { priority: 'high' }, calibration: { applied: false, detail: 'uncalibrated' }, cached_schema: false,
      timing: { start_ms: 1, input_preparation_ms: 5, prefill_ms: 50, prefill_tokens_per_second: 4000, prompt_tokens: 200, first_decision_ms: 100, branch_batches_ms: [40, 30, 20], total_ms: timing.total ?? 150 },
    },
    generator: {
      status: 'done', text: '{"priority": "high", "refund_requested": true}', stopped: true, prompt_mode: 'schema', parsed: { priority: 'high' },
      timing: { start_ms: 2, input_preparation_ms: 1, prefill_ms: 60, prefill_tokens_per_second: 3300, prompt_tokens: 200, first_token_ms: 62, decode_ms: 500, decode_tokens_per_second: timing.decode ?? 40, output_tokens: 21, total_ms: 562 },
    },
    total_ms: 565,
    ...over,
  };
}

package app

import "testing"

func TestExtractAnswer(t *testing.T) {
	fields := []string{"priority", "refund"}
	for _, tc := range []struct {
		text, want, err string
	}{
		{`{"priority": "high"}`, `{"priority":"high"}`, ""},
		{"Use {} for none.\n```json\n{\"priority\": \"low\", \"x\": {\"y\": \"}\"}}\n```", `{"priority":"low","x":{"y":"}"}}`, ""},
		{`{"example": 1} then {"refund": true}`, `{"refund":true}`, ""},
		{`{bad} {"priority": "low"}`, `{"priority":"low"}`, ""},
		{`The answer is {} as far as I can tell.`, "", "no JSON object with the fields (priority, refund)"},
		{`{"other": 1}`, "", "no JSON object with the fields (priority, refund)"},
		{`{"priority": `, "", "not valid JSON: unexpected EOF"},
		{`no json here`, "", "no JSON object in the text"},
		{``, "", "no text"},
	} {
		got, err := ExtractAnswer(tc.text, fields)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if string(got) != tc.want || msg != tc.err {
			t.Errorf("ExtractAnswer(%q) = %s, %q; want %s, %q", tc.text, got, msg, tc.want, tc.err)
		}
	}
	if got, err := ExtractAnswer(`{}`, nil); err != nil || string(got) != `{}` {
		t.Errorf("without fields, any object is the answer: %s, %v", got, err)
	}
}

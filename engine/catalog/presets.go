package catalog

import (
	_ "embed"
	"sync"
)

//go:embed tools.json
var toolsJSON []byte

var tools = sync.OnceValue(func() []Entry {
	es, err := ParseEntries(toolsJSON)
	if err != nil {
		panic("catalog: the embedded tools catalog: " + err.Error())
	}
	return es
})

// Tools returns the example tool catalog: 42 assistant tools (weather,
// email, calendar, orders, files, …) with one-line descriptions, the catalog
// of the reference fixture.
func Tools() []Entry { return append([]Entry(nil), tools()...) }

// ToolRequests are example requests for the tool catalog with the number
// of tools each needs.
var ToolRequests = []struct {
	Text string
	K    int
}{
	{"I need to know if I should bring an umbrella to my meeting in Berlin tomorrow and put it in my calendar.", 2},
	{"My order never arrived; find out where it is and get my money back.", 3},
	{"Play something relaxing and dim the living room lights.", 2},
	{"Translate this contract into German, summarize it, and email it to Anna.", 3},
	{"How much is 250 dollars in yen?", 1},
	{"Book dinner for four near the office tonight and get me a ride there.", 3},
	{"Look at this photo of my receipt and create an invoice from it, then save a note.", 4},
	{"What's happening in the markets today?", 5},
}

package catalog

// Differ is differ, for the tests.
var Differ = differ

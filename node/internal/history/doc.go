// Package history owns what a node's dashboard reads of the past and of
// the markets around it: the price history of the fills it applied
// (stored, one point per fill), the recent telemetry of its GPUs (in
// memory), and the summary of the markets it joined or knows from
// providers' offers.
//
// [Prices] stores and reads the price history through the node's store;
// it holds no lock. [Telemetry] is a ring of samples per GPU under one
// leaf lock. [Summaries] is a function of the books and offers it is
// given, with no state.
package history

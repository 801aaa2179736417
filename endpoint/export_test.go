package endpoint

// NatsURL is the address of the tests' embedded server, for the examples.
func NatsURL() string { return natsURL }

package main

import "errors"

// writeHTML writes the run's timeline.
func writeHTML(path string, r *report) error {
	return errors.New("the HTML timeline is not built yet")
}

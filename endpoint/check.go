package endpoint

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// allowedSubject describes the subjects CheckSubject allows.
const allowedSubject = "tokens of printable characters other than * and >, separated by single dots, such as svc.report"

// CheckSubject returns an error naming what is allowed if subject cannot be
// an endpoint's subject, or nil: it must be a subject that one request is
// sent to, with no wildcard (* or >), no white space, no empty token (a dot
// at the start or end, or two in a row), and not the server's, JetStream's
// or micro's own ($ at the start).
func CheckSubject(subject string) error {
	switch {
	case subject == "":
		return fmt.Errorf("the subject is empty; allowed: %s", allowedSubject)
	case strings.HasPrefix(subject, "$"):
		return fmt.Errorf("subject %q: subjects starting with $ are the server's, JetStream's and micro's own; allowed: %s", subject, allowedSubject)
	}
	for _, r := range subject {
		switch {
		case r == '*' || r == '>':
			return fmt.Errorf("subject %q has the wildcard %q: an endpoint serves one subject; allowed: %s", subject, r, allowedSubject)
		case unicode.IsSpace(r) || !unicode.IsPrint(r):
			return fmt.Errorf("subject %q has white space or a control character (%q); allowed: %s", subject, r, allowedSubject)
		}
	}
	for _, token := range strings.Split(subject, ".") {
		if token == "" {
			return fmt.Errorf("subject %q has an empty token (a dot at the start or end, or two in a row); allowed: %s", subject, allowedSubject)
		}
	}
	return nil
}

// CheckServiceName returns an error naming what is allowed if name cannot
// name a micro service, or nil: letters A-Z and a-z, digits, - and _.
func CheckServiceName(name string) error {
	if name == "" {
		return errors.New("the service name is empty; allowed: letters A-Z a-z, digits 0-9, - and _")
	}
	for _, r := range name {
		if !serviceNameRune(r) {
			return fmt.Errorf("service name %q has %q; allowed: letters A-Z a-z, digits 0-9, - and _", name, r)
		}
	}
	return nil
}

// CheckQueueGroup returns an error naming what is allowed if group cannot
// be a queue group, or nil: one token of printable characters, no
// wildcard, no white space.
func CheckQueueGroup(group string) error {
	if group == "" {
		return errors.New("the queue group is empty")
	}
	for _, r := range group {
		if r == '*' || r == '>' || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("queue group %q has %q; allowed: printable characters other than white space, * and >", group, r)
		}
	}
	return nil
}

// ServiceName returns a micro service name made of key (an election key):
// key with each character that CheckServiceName does not allow replaced by
// _, such as reports/eu.west → reports_eu_west; "kvelect" for "".
func ServiceName(key string) string {
	if key == "" {
		return "kvelect"
	}
	return strings.Map(func(r rune) rune {
		if serviceNameRune(r) {
			return r
		}
		return '_'
	}, key)
}

func serviceNameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_'
}

// Package browser tests the dashboard of cmd/election in a real headless
// browser (Chromium, driven by chromedp). It is a module of its own so that
// the library's go.mod stays free of the browser driver.
//
//	apt-get install chromium    # or set CHROMIUM to a Chrome or Chromium binary
//	cd browser && go test ./...
//	KVELECT_SCREENSHOT=../docs/dashboard.png go test ./...   # also writes a screenshot
package browser

package election_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

func TestCreateBucketCreatesWithSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, js := testenv.Connect(t, testenv.Server(t).ClientURL())
	for _, cfg := range []election.BucketConfig{
		{Name: "FILE", TTL: 3 * time.Second},
		{Name: "MEMORY", TTL: time.Hour, Replicas: 1, Storage: jetstream.MemoryStorage},
	} {
		kv, err := election.CreateBucket(ctx, js, cfg)
		if err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
		status, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := status.(*jetstream.KeyValueBucketStatus).StreamInfo().Config
		if got.MaxAge != cfg.TTL || got.Storage != cfg.Storage || got.Replicas != 1 || got.AllowMsgTTL ||
			got.Discard != jetstream.DiscardNew {
			t.Errorf("%s: stream config TTL %v, storage %v, replicas %d, per-message TTL %v, discard %v; want TTL %v, storage %v, 1 replica, no per-message TTL, discard new",
				cfg.Name, got.MaxAge, got.Storage, got.Replicas, got.AllowMsgTTL, got.Discard, cfg.TTL, cfg.Storage)
		}
		warnings, err := election.CheckBucket(ctx, kv)
		if err != nil {
			t.Errorf("%s: CheckBucket on a bucket CreateBucket made: %v", cfg.Name, err)
		}
		wantMemoryWarning := cfg.Storage == jetstream.MemoryStorage
		if len(warnings) != btoi(wantMemoryWarning) || wantMemoryWarning && !strings.Contains(warnings[0], "memory storage") {
			t.Errorf("%s: warnings %q, want only a memory storage warning on memory buckets", cfg.Name, warnings)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestCreateBucketLeavesAnExistingBucketAsItIs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, js := testenv.Connect(t, testenv.Server(t).ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E", TTL: 5 * time.Second, History: 3})

	kv, err := election.CreateBucket(ctx, js, election.BucketConfig{Name: "E", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	status, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if status.TTL() != 5*time.Second || status.History() != 3 {
		t.Errorf("existing bucket now has TTL %v and history %d, want it unchanged at 5s and 3", status.TTL(), status.History())
	}
}

func TestCreateBucketRejectsBadConfig(t *testing.T) {
	t.Parallel()
	_, js := testenv.Connect(t, testenv.Server(t).ClientURL())
	ok := election.BucketConfig{Name: "B", TTL: 10 * time.Second}
	for name, tc := range map[string]struct {
		change func(*election.BucketConfig)
		want   error
		says   string
	}{
		"empty name":        {func(c *election.BucketConfig) { c.Name = "" }, election.ErrBucketConfig, `bucket name ""`},
		"dotted name":       {func(c *election.BucketConfig) { c.Name = "a.b" }, election.ErrBucketConfig, "letters, digits, - and _"},
		"no TTL":            {func(c *election.BucketConfig) { c.TTL = 0 }, election.ErrBucketConfig, "TTL 0s, allowed 2s to 1h0m0s"},
		"TTL too short":     {func(c *election.BucketConfig) { c.TTL = time.Second }, election.ErrBucketConfig, "TTL 1s"},
		"TTL too long":      {func(c *election.BucketConfig) { c.TTL = 2 * time.Hour }, election.ErrBucketConfig, "TTL 2h0m0s"},
		"even replicas":     {func(c *election.BucketConfig) { c.Replicas = 2 }, election.ErrBucketConfig, "replicas 2: allowed 1, 3 or 5"},
		"too many replicas": {func(c *election.BucketConfig) { c.Replicas = 7 }, election.ErrBucketConfig, "replicas 7"},
		"negative replicas": {func(c *election.BucketConfig) { c.Replicas = -1 }, election.ErrBucketConfig, "replicas -1"},
		"unknown storage":   {func(c *election.BucketConfig) { c.Storage = 9 }, election.ErrBucketConfig, "storage type 9: allowed jetstream.FileStorage or jetstream.MemoryStorage"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := ok
			tc.change(&cfg)
			kv, err := election.CreateBucket(context.Background(), js, cfg)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v, want an error matching %q that says %q", err, tc.want, tc.says)
			}
			if kv != nil {
				t.Errorf("got a bucket along with the error")
			}
		})
	}
	var names []string
	for name := range js.KeyValueStoreNames(context.Background()).Name() {
		names = append(names, name)
	}
	if len(names) > 0 {
		t.Errorf("bad configs created buckets: %v", names)
	}
}

func TestCreateBucketRefusesAnUnusableExistingBucket(t *testing.T) {
	t.Parallel()
	_, js := testenv.Connect(t, testenv.Server(t).ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "FOREVER"})
	_, err := election.CreateBucket(context.Background(), js, election.BucketConfig{Name: "FOREVER", TTL: 10 * time.Second})
	var be *election.BucketError
	if !errors.As(err, &be) || !errors.Is(err, election.ErrBucketConfig) || be.Bucket != "FOREVER" {
		t.Fatalf("got %v, want a *BucketError for FOREVER matching ErrBucketConfig", err)
	}
}

func TestCreateBucketReportsAnUnreachableServer(t *testing.T) {
	t.Parallel()
	s, err := embedded.Server(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	nc, js := testenv.Connect(t, s.ClientURL())
	embedded.Shutdown(s)
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = election.CreateBucket(ctx, js, election.BucketConfig{Name: "B", TTL: 10 * time.Second})
	if !errors.Is(err, election.ErrBucketStatus) {
		t.Fatalf("got %v, want ErrBucketStatus", err)
	}
}

// TestCheckBucketNamesEveryProblem makes a bucket with each unusable setting,
// and one with several, and checks that the error names each.
func TestCheckBucketNamesEveryProblem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, js := testenv.Connect(t, testenv.Server(t).ClientURL())
	// limit changes the stream behind a bucket the KV API cannot make.
	limit := func(bucket string, change func(*jetstream.StreamConfig)) {
		t.Helper()
		info, err := js.Stream(ctx, "KV_"+bucket)
		if err != nil {
			t.Fatal(err)
		}
		cfg := info.CachedInfo().Config
		change(&cfg)
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ORIGIN", TTL: 10 * time.Second})

	for name, tc := range map[string]struct {
		cfg   jetstream.KeyValueConfig
		limit func(*jetstream.StreamConfig)
		want  []error
		says  []string
	}{
		"no TTL": {
			cfg:  jetstream.KeyValueConfig{},
			want: []error{election.ErrBucketConfig},
			says: []string{"no TTL", "allowed: a TTL from 2s to 1h0m0s"},
		},
		"TTL too short": {
			cfg:  jetstream.KeyValueConfig{TTL: time.Second},
			want: []error{election.ErrBucketConfig},
			says: []string{"TTL 1s, allowed 2s to 1h0m0s"},
		},
		"TTL too long": {
			cfg:  jetstream.KeyValueConfig{TTL: 2 * time.Hour},
			want: []error{election.ErrBucketConfig},
			says: []string{"TTL 2h0m0s"},
		},
		"evicts at a message limit": {
			cfg:   jetstream.KeyValueConfig{TTL: 10 * time.Second},
			limit: func(c *jetstream.StreamConfig) { c.Discard, c.MaxMsgs = jetstream.DiscardOld, 100 },
			want:  []error{election.ErrBucketConfig},
			says:  []string{"discards old messages", "max messages 100", "allowed: discard policy new"},
		},
		"evicts at a byte limit": {
			cfg:   jetstream.KeyValueConfig{TTL: 10 * time.Second},
			limit: func(c *jetstream.StreamConfig) { c.Discard, c.MaxBytes = jetstream.DiscardOld, 1<<20 },
			want:  []error{election.ErrBucketConfig},
			says:  []string{"max bytes 1048576"},
		},
		"sealed": {
			cfg:   jetstream.KeyValueConfig{TTL: 10 * time.Second},
			limit: func(c *jetstream.StreamConfig) { c.Sealed = true },
			// The server drops a sealed stream's limits, its TTL too.
			want: []error{election.ErrBucketConfig, election.ErrBucketConfig},
			says: []string{"sealed"},
		},
		"mirror": {
			cfg:  jetstream.KeyValueConfig{TTL: 10 * time.Second, Mirror: &jetstream.StreamSource{Name: "ORIGIN"}},
			want: []error{election.ErrBucketConfig},
			says: []string{"mirrors KV_ORIGIN", "allowed: the origin bucket"},
		},
		"several": {
			cfg:   jetstream.KeyValueConfig{},
			limit: func(c *jetstream.StreamConfig) { c.Discard, c.MaxMsgs = jetstream.DiscardOld, 100 },
			want:  []error{election.ErrBucketConfig, election.ErrBucketConfig},
			says:  []string{"no TTL", "; stream KV_"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			tc.cfg.Bucket = strings.NewReplacer(" ", "_").Replace(name)
			kv := testenv.Bucket(t, js, tc.cfg)
			if tc.limit != nil {
				limit(tc.cfg.Bucket, tc.limit)
			}
			_, err := election.CheckBucket(ctx, kv)
			var be *election.BucketError
			if !errors.As(err, &be) || !errors.Is(err, election.ErrBucketConfig) || len(be.Problems) != len(tc.want) {
				t.Fatalf("got %v, want a *BucketError with %d problems", err, len(tc.want))
			}
			for _, want := range tc.want {
				if !errors.Is(err, want) {
					t.Errorf("%v does not match %q", err, want)
				}
			}
			for _, s := range append(tc.says, `bucket "`+tc.cfg.Bucket+`"`) {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%q does not say %q", err, s)
				}
			}
		})
	}
}

func TestCheckBucketWarnsAboutPerMessageTTLs(t *testing.T) {
	t.Parallel()
	_, js := testenv.Connect(t, testenv.Server(t).ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "MARKERS", TTL: 10 * time.Second, LimitMarkerTTL: time.Second})
	warnings, err := election.CheckBucket(context.Background(), kv)
	if err != nil {
		t.Fatalf("markers make failover slower, not elections unsafe: got %v", err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "per-message TTLs are on") || !strings.Contains(warnings[0], "one TTL longer") {
		t.Errorf("warnings %q, want one about per-message TTLs costing a TTL", warnings)
	}
}

func TestCheckBucketWarnsAboutEvenReplicas(t *testing.T) {
	t.Parallel()
	nodes := testenv.Cluster(t)
	_, js := testenv.Connect(t, embedded.ClientURLs(nodes))
	for replicas, want := range map[int]string{2: "2 replicas tolerate no more server failures than 1", 3: ""} {
		kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: fmt.Sprintf("R%d", replicas), TTL: 15 * time.Second, Replicas: replicas}) // long enough to ride out a stream-leader election
		warnings, err := election.CheckBucket(context.Background(), kv)
		if err != nil {
			t.Fatalf("R%d: %v", replicas, err)
		}
		if want == "" && len(warnings) > 0 || want != "" && (len(warnings) != 1 || !strings.Contains(warnings[0], want)) {
			t.Errorf("R%d: warnings %q, want %q", replicas, warnings, want)
		}
	}
}

func TestCheckBucketReportsAMissingBucket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, js := testenv.Connect(t, testenv.Server(t).ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "GONE", TTL: 10 * time.Second})
	if err := js.DeleteKeyValue(ctx, "GONE"); err != nil {
		t.Fatal(err)
	}
	if _, err := election.CheckBucket(ctx, kv); !errors.Is(err, election.ErrBucketStatus) || !strings.Contains(err.Error(), `"GONE"`) {
		t.Fatalf("got %v, want ErrBucketStatus naming GONE", err)
	}
	if _, err := election.CheckBucket(ctx, nil); !errors.Is(err, election.ErrInvalidArgument) {
		t.Fatalf("nil bucket: got %v, want ErrInvalidArgument", err)
	}
}

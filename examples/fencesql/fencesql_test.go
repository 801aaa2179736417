package fencesql_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/examples/fencesql"
	"github.com/kvelect/election/fence"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// account creates the tables if needed and a fresh account id with
// balance 0 and no token.
func account(t *testing.T, id int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, fencesql.Schema); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO accounts (id, balance) VALUES ($1, 0)`, id); err != nil {
		t.Fatal(err)
	}
}

// logged returns the tokens account_log holds for account id, in the
// order the writes were accepted.
func logged(t *testing.T, id int64) []uint64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT fence_token FROM account_log WHERE account = $1 ORDER BY seq`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var tokens []uint64
	for rows.Next() {
		var tok int64
		if err := rows.Scan(&tok); err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, uint64(tok))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return tokens
}

func checkStale(t *testing.T, err error, token, highest uint64) {
	t.Helper()
	var stale *fence.StaleError
	if !errors.As(err, &stale) || !errors.Is(err, fence.ErrStale) || stale.Token != token || stale.Highest != highest {
		t.Fatalf("a write with token %d after %d: %v, want a *fence.StaleError with both", token, highest, err)
	}
}

// The done-when test in PostgreSQL: a paused ex-leader's UPDATE changes
// nothing once the new leader wrote, with tokens from real elections.
func TestAPausedExLeadersUpdateIsRefused(t *testing.T) {
	ctx := context.Background()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := election.CreateBucket(ctx, js, election.BucketConfig{Name: "SQL_ELECTIONS", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	candidate := func(name string) (*election.Election, <-chan uint64) {
		won := make(chan uint64, 1)
		e, err := election.NewElection(ctx, name, "ledger", kv, election.WithoutSplay(),
			election.OnWon(func(leading context.Context) {
				token, _ := election.TokenFromContext(leading)
				won <- token
				<-leading.Done()
			}))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := e.Start(ctx); err != nil {
				t.Errorf("%s: Start: %v", name, err)
			}
		}()
		t.Cleanup(func() {
			e.Stop()
			<-done
		})
		return e, won
	}
	await := func(name string, won <-chan uint64) uint64 {
		select {
		case token := <-won:
			return token
		case <-time.After(30 * time.Second):
			t.Fatalf("%s never won", name)
			return 0
		}
	}
	account(t, 1)
	a, wonA := candidate("A")
	tokenA := await("A", wonA)
	if err := fencesql.SetBalance(ctx, pool, 1, 100, tokenA); err != nil {
		t.Fatalf("A's write while it led: %v", err)
	}
	_, wonB := candidate("B")
	a.Stop() // A is paused from here on: it never learns, and writes with tokenA
	tokenB := await("B", wonB)
	if err := fencesql.SetBalance(ctx, pool, 1, 90, tokenB); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	checkStale(t, fencesql.SetBalance(ctx, pool, 1, 110, tokenA), tokenA, tokenB)
	var balance, token int64
	if err := pool.QueryRow(ctx, `SELECT balance, fence_token FROM accounts WHERE id = 1`).Scan(&balance, &token); err != nil {
		t.Fatal(err)
	}
	if balance != 90 || uint64(token) != tokenB {
		t.Fatalf("the row holds balance %d with token %d, want B's 90 with %d", balance, token, tokenB)
	}
}

func TestEqualTokensAreAcceptedAndLowerRefused(t *testing.T) {
	ctx := context.Background()
	account(t, 2)
	for _, w := range []struct {
		token uint64
		stale bool
	}{{5, false}, {5, false}, {9, false}, {5, true}, {8, true}, {9, false}} {
		err := fencesql.SetBalance(ctx, pool, 2, int64(w.token), w.token)
		if w.stale {
			checkStale(t, err, w.token, 9)
		} else if err != nil {
			t.Fatalf("token %d: %v", w.token, err)
		}
	}
	if got := fmt.Sprint(logged(t, 2)); got != "[5 5 9 9]" {
		t.Fatalf("the log holds tokens %s, want the accepted writes' [5 5 9 9]", got)
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	account(t, 3)
	for _, token := range []uint64{0, 1 << 63} {
		if err := fencesql.SetBalance(ctx, pool, 3, 1, token); !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("token %d: %v, want ErrInvalidArgument", token, err)
		}
	}
	if err := fencesql.SetBalance(ctx, pool, 999, 1, 1); !errors.Is(err, fencesql.ErrNoAccount) {
		t.Errorf("a missing account: %v, want ErrNoAccount", err)
	}
}

// Many writers at once with random tokens, each in a transaction of its
// own: the accepted writes, in the order the log holds them, never go down
// in token, and each refused one was refused for a higher token.
func TestConcurrentWritersNeverStoreADecreasingToken(t *testing.T) {
	ctx := context.Background()
	account(t, 4)
	var mu sync.Mutex
	accepted := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				token := rand.Uint64N(20) + 1
				err := fencesql.SetBalance(ctx, pool, 4, int64(token), token)
				var stale *fence.StaleError
				switch {
				case err == nil:
					mu.Lock()
					accepted++
					mu.Unlock()
				case errors.As(err, &stale):
					if stale.Highest <= token {
						t.Errorf("token %d refused for token %d", token, stale.Highest)
					}
				default:
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	tokens := logged(t, 4)
	if len(tokens) != accepted || accepted == 0 || accepted == 200 {
		t.Fatalf("%d of 200 writes accepted, the log holds %d", accepted, len(tokens))
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] < tokens[i-1] {
			t.Fatalf("the log holds token %d after token %d: %v", tokens[i], tokens[i-1], tokens)
		}
	}
}

package fencesql_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/kvelect/election/examples/fencesql"
	"github.com/kvelect/election/fence"
)

// A leader writes a row with its fencing token; once its successor wrote,
// the guarded UPDATE of the ex-leader changes no row, and SetBalance says
// why.
func ExampleSetBalance() {
	ctx := context.Background()
	if _, err := pool.Exec(ctx, fencesql.Schema); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO accounts (id, balance) VALUES (7, 0)`); err != nil {
		log.Fatal(err)
	}
	// In a leader's work: token, _ := election.TokenFromContext(leading).
	oldLeader, newLeader := uint64(41), uint64(57)
	if err := fencesql.SetBalance(ctx, pool, 7, 90, newLeader); err != nil {
		log.Fatal(err)
	}
	err := fencesql.SetBalance(ctx, pool, 7, 110, oldLeader)
	fmt.Println(errors.Is(err, fence.ErrStale))
	fmt.Println(err)

	var balance, token int64
	pool.QueryRow(ctx, `SELECT balance, fence_token FROM accounts WHERE id = 7`).Scan(&balance, &token)
	fmt.Println(balance, token)
	// Output:
	// true
	// fence: stale fencing token 41 for resource "accounts/7": it has accepted token 57 (the writer is no longer the leader)
	// 90 57
}

// Package fencesql is the fencing pattern for a SQL database, on
// PostgreSQL with the pgx driver: each fenced row has a fence_token column,
// and every write of a leader is a guarded UPDATE that sets the row's data
// and its token only where the stored token is not higher:
//
//	UPDATE accounts SET balance = $3, fence_token = $1
//	 WHERE id = $2 AND fence_token <= $1
//
// PostgreSQL evaluates the WHERE clause on the latest committed version of
// the row, under the row's lock: a concurrent UPDATE of the row waits for
// the other to commit and then checks the guard again on what it wrote. So
// the check and the write are one step at READ COMMITTED (the default, and
// what the tests run), and a row never gets a lower token after a higher
// one. At REPEATABLE READ or SERIALIZABLE a concurrent write fails the
// UPDATE with a serialization error (40001) instead, to be retried.
//
// When the UPDATE changes no row, either the row is absent or it holds a
// higher token: the writer is an ex-leader. SetBalance reads the row to
// tell which, and returns a *fence.StaleError (errors.Is(err,
// fence.ErrStale)) or ErrNoAccount. Never retry a stale write: stop acting,
// the work is the new leader's now. Everything else the write changes goes
// in the same transaction, after the guarded UPDATE, and is rolled back
// with it when it changes no row.
//
// Tokens are stored as bigint: tokens above 2^63−1 (never reached by an
// election bucket's revisions) are refused.
package fencesql

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/kvelect/election/fence"
)

// Schema creates the example's tables: accounts, fenced by fence_token, and
// account_log, which records each accepted write in order.
const Schema = `
CREATE TABLE IF NOT EXISTS accounts (
	id          bigint PRIMARY KEY,
	balance     bigint NOT NULL,
	fence_token bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS account_log (
	seq         bigserial PRIMARY KEY,
	account     bigint NOT NULL,
	balance     bigint NOT NULL,
	fence_token bigint NOT NULL
);`

// ErrNoAccount is returned by SetBalance for an account that does not
// exist.
var ErrNoAccount = errors.New("fencesql: no such account")

// Beginner starts transactions: a *pgx.Conn or a *pgxpool.Pool.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// SetBalance sets account id's balance with the leader's fencing token,
// unless the account holds a higher token: then it changes nothing and
// returns a *fence.StaleError. In the same transaction it logs the write in
// account_log, as other work of the leader would go.
func SetBalance(ctx context.Context, db Beginner, id, balance int64, token uint64) error {
	if token == 0 || token > math.MaxInt64 {
		return fmt.Errorf("%w: fencing token %d: want 1 to %d", fence.ErrInvalidArgument, token, int64(math.MaxInt64))
	}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx,
			`UPDATE accounts SET balance = $3, fence_token = $1 WHERE id = $2 AND fence_token <= $1`,
			int64(token), id, balance)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			// Absent, or a higher token is there: tell which. The row read
			// may have moved on since, but only to a higher token.
			var highest int64
			err := tx.QueryRow(ctx, `SELECT fence_token FROM accounts WHERE id = $1`, id).Scan(&highest)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("%w: %d", ErrNoAccount, id)
			}
			if err != nil {
				return err
			}
			return &fence.StaleError{Resource: fmt.Sprintf("accounts/%d", id), Token: token, Highest: uint64(highest)}
		}
		_, err = tx.Exec(ctx, `INSERT INTO account_log (account, balance, fence_token) VALUES ($1, $2, $3)`, id, balance, int64(token))
		return err
	})
}

// Go's lib/pq against `gpuledger serve`, driven by tests/it/drivers.rs: the protocol path of
// Grafana's PostgreSQL data source (a query without arguments goes as a simple query, as
// Grafana's does; one with arguments is prepared, bound and executed).
//
// Usage: libpq_client <port> <password>, with a JSON job on stdin (the shape of
// tests/drivers/python_clients.py's: statements, cases, cancel); prints a JSON report. It
// judges nothing: the Rust test compares the answers with psql's.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/lib/pq"
)

type job struct {
	Statements []string `json:"statements"`
	Cases      []struct {
		Name   string            `json:"name"`
		SQL    string            `json:"sql"`
		Params []json.RawMessage `json:"params"`
	} `json:"cases"`
	Cancel string `json:"cancel"`
}

// param turns a JSON parameter into what lib/pq binds: text, a number, NULL, a text array
// (pq.Array), or a time.Time that keeps its offset.
func param(raw json.RawMessage) (interface{}, error) {
	var v interface{}
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case []interface{}:
		items := make([]string, len(x))
		for i, item := range x {
			items[i] = fmt.Sprint(item)
		}
		return pq.Array(items), nil
	case map[string]interface{}:
		return time.Parse(time.RFC3339, fmt.Sprint(x["timestamptz"]))
	case float64:
		return int64(x), nil
	default:
		return x, nil
	}
}

// cell is a value as the report carries it: text as sent, instants in UTC.
func cell(v interface{}) interface{} {
	switch x := v.(type) {
	case nil:
		return nil
	case []byte:
		return string(x)
	case time.Time:
		return map[string]string{"instant": x.UTC().Format("2006-01-02T15:04:05-07:00")}
	default:
		return x
	}
}

func rows(db *sql.DB, query string) map[string]interface{} {
	r, err := db.Query(query)
	if err != nil {
		return map[string]interface{}{"error": err.Error()}
	}
	defer r.Close()
	header, _ := r.Columns()
	out := [][]string{}
	for r.Next() {
		cells := make([]sql.RawBytes, len(header))
		targets := make([]interface{}, len(header))
		for i := range cells {
			targets[i] = &cells[i]
		}
		if err := r.Scan(targets...); err != nil {
			return map[string]interface{}{"error": err.Error()}
		}
		row := make([]string, len(header))
		for i, c := range cells {
			row[i] = string(c)
		}
		out = append(out, row)
	}
	if err := r.Err(); err != nil {
		return map[string]interface{}{"error": err.Error()}
	}
	return map[string]interface{}{"header": header, "rows": out}
}

func runCase(db *sql.DB, query string, raw []json.RawMessage) map[string]interface{} {
	args := make([]interface{}, len(raw))
	for i, p := range raw {
		v, err := param(p)
		if err != nil {
			return map[string]interface{}{"error": err.Error()}
		}
		args[i] = v
	}
	r, err := db.Query(query, args...)
	if err != nil {
		return map[string]interface{}{"error": err.Error()}
	}
	defer r.Close()
	types, _ := r.ColumnTypes()
	var first interface{}
	n := 0
	for r.Next() {
		var v interface{}
		if err := r.Scan(&v); err != nil {
			return map[string]interface{}{"error": err.Error()}
		}
		if n == 0 {
			first = cell(v)
		}
		n++
	}
	if err := r.Err(); err != nil {
		return map[string]interface{}{"error": err.Error()}
	}
	return map[string]interface{}{"value": first, "type_name": types[0].DatabaseTypeName(), "rows": n}
}

func cancel(db *sql.DB, query string) map[string]interface{} {
	conn, err := db.Conn(context.Background())
	if err != nil {
		return map[string]interface{}{"error": err.Error()}
	}
	defer conn.Close()
	ctx, stop := context.WithTimeout(context.Background(), time.Second)
	defer stop()
	started := time.Now()
	out := map[string]interface{}{}
	r, err := conn.QueryContext(ctx, query)
	if err == nil {
		for r.Next() {
		}
		err = r.Err()
		r.Close()
	}
	if err == nil {
		out["finished"] = true
	} else if e, ok := err.(*pq.Error); ok {
		out["cancelled"] = e.Message
		out["sqlstate"] = string(e.Code)
	} else {
		out["cancelled"] = err.Error()
	}
	out["seconds"] = time.Since(started).Seconds()
	// lib/pq marks a connection whose context was cancelled as bad (database/sql then drops
	// it): the next statement goes through the pool, on a new connection.
	conn.Close()
	var one int
	if err := db.QueryRow("SELECT 1").Scan(&one); err != nil {
		out["next_error"] = err.Error()
	}
	out["next"] = one
	return out
}

func main() {
	var j job
	if err := json.NewDecoder(os.Stdin).Decode(&j); err != nil {
		fmt.Fprintln(os.Stderr, "libpq_client: the job is not JSON:", err)
		os.Exit(2)
	}
	dsn := fmt.Sprintf("host=127.0.0.1 port=%s user=grafana password=%s dbname=datafusion sslmode=disable", os.Args[1], os.Args[2])
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, "libpq_client:", err)
		os.Exit(2)
	}
	defer db.Close()
	report := map[string]interface{}{}
	answers := []interface{}{}
	for _, s := range j.Statements {
		answers = append(answers, rows(db, s))
	}
	report["rows"] = answers
	cases := []interface{}{}
	for _, c := range j.Cases {
		cases = append(cases, runCase(db, c.SQL, c.Params))
	}
	report["cases"] = cases
	if j.Cancel != "" {
		report["cancel"] = cancel(db, j.Cancel)
	}
	if err := json.NewEncoder(os.Stdout).Encode(report); err != nil {
		fmt.Fprintln(os.Stderr, "libpq_client:", err)
		os.Exit(2)
	}
}

package sqlserver

import (
	"regexp"
	"strings"
	"testing"
)

// CheckGrammar is checkGrammar for the external test package (the
// contract suite's own statements).
var CheckGrammar = checkGrammar

var (
	execCall   = regexp.MustCompile(`(?i)\bEXEC(UTE)?\s*\(`)
	execPart   = regexp.MustCompile(`^(N?'([^']|'')*'|@[A-Za-z_][A-Za-z0-9_]*)$`)
	aggConcat  = regexp.MustCompile(`(?i)\bSELECT\s+@[A-Za-z_][A-Za-z0-9_]*\s*(\+=|=\s*@[A-Za-z_][A-Za-z0-9_]*\s*\+)`)
	fromClause = regexp.MustCompile(`(?i)\bFROM\b`)
	// dmlTarget is an UPDATE or DELETE whose target carries hints.
	dmlTarget = regexp.MustCompile(`(?i)\b(UPDATE|DELETE)\s+(TOP\s*\([^)]*\)\s*)?(FROM\s+)?[\[\]\w.@]+\s+WITH\s*\(`)
	seekHint  = regexp.MustCompile(`(?i)\b(INDEX\s*\(|FORCESEEK|FORCESCAN)`)
)

// checkGrammar reports T-SQL that SQL Server's grammar refuses, or whose
// result its documentation leaves undefined, in the forms this project
// has met:
//   - EXEC(…) takes only string literals and variables joined with "+"
//     (a function call such as QUOTENAME inside it fails to parse);
//   - SELECT @v += … FROM … (aggregate concatenation) is undefined over
//     several rows;
//   - an UPDATE or DELETE target takes only the limited table hints: no
//     INDEX, FORCESEEK or FORCESCAN (name the table in a FROM clause,
//     where every hint is allowed).
func checkGrammar(sql string) []string {
	var problems []string
	for _, loc := range execCall.FindAllStringIndex(sql, -1) {
		inner, ok := parenBody(sql[loc[1]:])
		if !ok {
			problems = append(problems, "unbalanced EXEC(")
			continue
		}
		for _, part := range splitTopLevelPlus(inner) {
			if p := strings.TrimSpace(part); !execPart.MatchString(p) {
				problems = append(problems, "EXEC( takes only literals and variables joined with +, not "+p)
			}
		}
	}
	for _, loc := range aggConcat.FindAllStringIndex(sql, -1) {
		stmt := sql[loc[0]:]
		stmt = stmt[:statementEnd(stmt)]
		if fromClause.MatchString(stmt) {
			problems = append(problems, "aggregate concatenation (SELECT @v += … FROM …) is undefined over several rows: "+strings.Join(strings.Fields(stmt), " "))
		}
	}
	for _, loc := range dmlTarget.FindAllStringIndex(sql, -1) {
		hints, ok := parenBody(sql[loc[1]:])
		if ok && seekHint.MatchString(hints) {
			problems = append(problems, "an UPDATE or DELETE target takes no INDEX, FORCESEEK or FORCESCAN hint: "+strings.Join(strings.Fields(sql[loc[0]:loc[1]]+hints+")"), " "))
		}
	}
	return problems
}

// walk calls fn with the index and byte of every character of s outside
// string literals (a doubled quote inside a literal escapes one), and the
// parenthesis depth before it; fn returns false to stop.
func walk(s string, fn func(i int, c byte, depth int) bool) {
	depth, inStr := 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inStr:
			if c == '\'' {
				if i+1 < len(s) && s[i+1] == '\'' {
					i++
				} else {
					inStr = false
				}
			}
			continue
		case c == '\'':
			inStr = true
			continue
		}
		if !fn(i, c, depth) {
			return
		}
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		}
	}
}

// statementEnd returns the index of the first ";" of s outside string
// literals, or len(s).
func statementEnd(s string) int {
	end := len(s)
	walk(s, func(i int, c byte, _ int) bool {
		if c == ';' {
			end = i
			return false
		}
		return true
	})
	return end
}

// parenBody returns s up to the parenthesis closing one already open,
// skipping string literals.
func parenBody(s string) (string, bool) {
	end := -1
	walk(s, func(i int, c byte, depth int) bool {
		if c == ')' && depth == 0 {
			end = i
			return false
		}
		return true
	})
	if end < 0 {
		return "", false
	}
	return s[:end], true
}

// splitTopLevelPlus splits s at "+" outside literals and parentheses.
func splitTopLevelPlus(s string) []string {
	var parts []string
	start := 0
	walk(s, func(i int, c byte, depth int) bool {
		if c == '+' && depth == 0 {
			parts = append(parts, s[start:i])
			start = i + 1
		}
		return true
	})
	return append(parts, s[start:])
}

func TestCheckGrammarCatches(t *testing.T) {
	bad := []string{
		`IF SCHEMA_ID(@p1) IS NOT NULL EXEC(N'DROP SCHEMA ' + QUOTENAME(@p1));`,
		`DECLARE @sql nvarchar(max) = N'';
SELECT @sql += N'DROP TABLE ' + QUOTENAME(t.name) + N'; ' FROM sys.tables AS t;`,
		`SELECT @s = @s + name FROM sys.tables;`,
		`UPDATE TOP (@p1) [a].[q] WITH (INDEX([q_leased]), FORCESEEK, UPDLOCK) SET state = 0;`,
		`DELETE TOP (@p1) FROM [a].[q] WITH (FORCESEEK, READPAST, READCOMMITTEDLOCK) WHERE state = 0;`,
	}
	for _, s := range bad {
		if len(checkGrammar(s)) == 0 {
			t.Errorf("not caught: %s", s)
		}
	}
	good := []string{
		`EXEC(N'CREATE SCHEMA [a''b]')`,
		`EXEC(@sql + N';')`,
		`SET @sql = N'DROP SCHEMA ' + QUOTENAME(@s); EXEC sp_executesql @sql;`,
		`SELECT TOP (1) @sql = N'DROP TABLE ' + QUOTENAME(t.name) FROM sys.tables AS t;`,
		`UPDATE TOP (@p1) q SET state = 0 FROM [a].[q] AS q WITH (INDEX([q_leased]), FORCESEEK, UPDLOCK) WHERE q.state > 0;`,
		`DELETE FROM [a].[q] WITH (ROWLOCK) WHERE id = @p1;`,
	}
	for _, s := range good {
		if p := checkGrammar(s); len(p) != 0 {
			t.Errorf("false alarm on %s: %v", s, p)
		}
	}
}

// TestStatementsGrammar runs checkGrammar on every statement the dialect
// writes.
func TestStatementsGrammar(t *testing.T) {
	for name, sts := range allStatements() {
		for i, st := range sts {
			for _, p := range checkGrammar(st.SQL) {
				t.Errorf("%s[%d]: %s", name, i, p)
			}
		}
	}
}

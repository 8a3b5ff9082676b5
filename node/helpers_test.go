package node_test

import "fmt"

func sprint(v ...any) string { return fmt.Sprintf("%+v", v) }

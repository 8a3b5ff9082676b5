package proto

// Regenerating needs protoc (Debian: protobuf-compiler) and protoc-gen-go:
//   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//go:generate protoc --go_out=. --go_opt=paths=source_relative offer.proto book.proto attest.proto receipt.proto resale.proto close.proto

// Command readme is the program the project's README shows: causal
// attention in a Gorgonia graph, and its gradients. kvcache.go holds the
// README's key/value cache, which its test runs. It lives here so that
// `go build ./...` compiles it and `go test ./...` runs it; its test fails
// when a Go block of the README is not found here, word for word (gpu/
// holds the README's GPU variant, ring/ its ring attention program).
//
//	go run ./examples/readme
package main

// Command bench measures what gpuctk adds to a container's start and prints
// one table, the one `make bench` shows and the README's performance
// section carries. Processes (the hook, the runtime, `gpuctk cdi
// generate`) are timed whole, each run beside a baseline run in the same
// loop; functions (spec generation, resolving a device through the CDI
// library) come from the cdi package's Go benchmarks. Every figure is the
// median of -runs runs. It needs root (runc, mknod) and the binaries that
// `make build` puts in bin/.
//
//	go run ./tests/bench -bin bin -runs 25 -out bench.txt -perf perf.md
package main

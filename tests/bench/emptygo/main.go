// Command emptygo does nothing: the bench times it as the hook, with the
// hook's environment and arguments, for the floor under the hook's rows
// (a static Go program's start and exit on this machine, in the same run).
package main

func main() {}

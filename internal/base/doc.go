// Package base is the folder of Cloister's shared leaves: small
// single-purpose packages that any subsystem may import and that import
// nothing of Cloister but each other (startup, tee, version, atomicfile,
// keyfile, proc, strictjson). It has no code of its own.
package base

// Package dev is the folder of development tooling, none of it deployed:
// cluster (the local dev cluster and what keeps its packets on the
// machine), realnode (its one real node), toolchain (the pinned Kubernetes
// components), image (images without Docker) and testenv (the real parts
// tests run against). It has no code of its own.
package dev

// Package workload is the folder of confidential workloads: what makes a
// pod confidential from the user's YAML to the node. generate rewrites the
// YAML; podpolicy is the pod's policy; imagepin and imagesig pin and check
// images; runtimeclass names the confidential runtime and nodeinstaller
// puts it on a node (cloister-node-installer); initializer attests the pod
// to CAS from inside it (cloister-initializer). It has no code of its own.
package workload

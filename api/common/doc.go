// Package common holds the API types every Cloister service kind shares:
// the configuration every service has (image, resources, node selector) and the
// status every service reports (state, conditions, observedGeneration).
// It is not an API group of its own; the group packages embed these types.
// +kubebuilder:object:generate=true
package common

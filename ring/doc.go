// Package ring is sequence-parallel attention (ring attention): each rank
// of a ring holds a block of the sequence, key and value blocks travel
// around the ring while each rank attends its queries to the block it
// holds, and the partial results merge through their log-sum-exp.
package ring

"""The state of a checkpoint's stateful operators, read without a JVM: metadata (:mod:`.metadata`),
file formats (:mod:`.files`), per-store chains (:mod:`.chain`), the reader (:mod:`.reader`), the state
findings (:mod:`.rules`) and the restart preflight (:mod:`.preflight`)."""

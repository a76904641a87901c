"""The state of a checkpoint's stateful operators, read without a JVM."""

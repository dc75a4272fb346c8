"""The reliability benchmark: load, overload, disconnect storms, hot pool changes and faults
against real `hedgespec serve` processes (tests/reliability/ runs the same scenarios at CI
size)."""

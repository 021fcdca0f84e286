# Puts the repository root on sys.path so tests can use the reference implementations kept in
# benchmarks/ (the naive ReTran and the plain generator).

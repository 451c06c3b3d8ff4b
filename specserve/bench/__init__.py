"""`specserve bench`: benchmark client, prompt sets, compare, sweep and report (see README "Benchmark client")."""

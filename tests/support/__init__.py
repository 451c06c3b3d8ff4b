"""What the tests share: tiny checkpoints (models, model_drafters, block_drafters), test-only
proposers, reference implementations, a real server subprocess (server), the command line as a
subprocess (cli), the distribution check for sampled output (distribution) and prompts."""

"""The policy wire's vocabulary: the codec, the observation keys, the
server's declarations (``spec``) and the action units, on plain arrays."""

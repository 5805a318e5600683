"""The station daemon: drivers, simulated cell, control loop, recorder, policy clients."""

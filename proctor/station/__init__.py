"""The station daemon: drivers, simulated cell, control loop, recorder (the policy
protocol it speaks is ``proctor.policywire``)."""

"""What the target stack must have, checked where the job will run: the check registry (imports no check), the stack checks, the job checks, what is installed, and the report that runs them."""

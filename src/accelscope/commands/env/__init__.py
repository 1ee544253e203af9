"""``accelscope env``: what this machine is and what it can do fast (measured)."""

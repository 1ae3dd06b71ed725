"""The ranks of an oracle script, one process each (fsdp_reference.py, dcp_oracle.py)."""


def wait_all(ranks, timeout=150):
    """0 when every rank (a subprocess.Popen) exited 0; one still running at the timeout is
    killed, and so are the others when waiting fails."""
    try:
        codes = [p.wait(timeout=timeout) for p in ranks]
    finally:
        for p in ranks:
            if p.poll() is None:
                p.kill()
    return 0 if all(c == 0 for c in codes) else 1

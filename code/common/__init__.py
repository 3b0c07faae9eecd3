"""Shared runtime of the course scripts: launcher, α-β cost model, command-line flags and output.

Only this package starts processes, picks rendezvous ports, sets timeouts and threads; scripts
import what they need from here and keep the mechanism they teach in their own file.
"""

"""Inputs and files: planning work units (stage 1), reading their text, counts files, atomic writes.

Owns: what a work unit is (units), the plan (plan), streaming text of a unit (readers), reading
counts files (counts_files), writing a file under its real name only when complete (atomic).
Imports nothing else of parbpe: every stage may use it.
"""

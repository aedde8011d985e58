"""Inputs and files: planning work units (stage 1), reading their text, counts files, atomic writes.

Owns: what a work unit is (units), the plan (plan), streaming a unit's text (readers), texts from
Python as batches (iterables), reading counts files (counts_files), paths and URIs (filesystems), a
deterministic sample of the input (sample), writing a file under its real name only when complete
(atomic). Every stage may use it, so it imports nothing else of parbpe.

Imports: nothing.
"""

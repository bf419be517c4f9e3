"""The session format: strict JSON, canonical form, records and the parallel reader (the ground layer).

Modules here import nothing from the other layers of the package.
"""

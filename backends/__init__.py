"""Backends: one package per device type, each with a device, an allocator and a kernel table.

Backends import portable's interfaces and never each other (DESIGN.md section 2).
"""

"""blindsg23.spec"""

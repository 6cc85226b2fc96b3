"""blindsg23.managers"""

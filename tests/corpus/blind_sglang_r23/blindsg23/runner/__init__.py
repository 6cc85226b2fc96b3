"""blindsg23.runner"""

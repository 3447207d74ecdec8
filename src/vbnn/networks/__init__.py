"""networks"""

"""priors"""

"""Spark engine: the one place a SparkSession is configured."""

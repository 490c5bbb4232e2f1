"""The login-node side: command line, settings, job layout, and the executors that run or queue the stages."""

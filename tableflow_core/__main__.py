from tableflow_core.cli.main import main

main()

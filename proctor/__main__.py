from proctor.cli import main

main()

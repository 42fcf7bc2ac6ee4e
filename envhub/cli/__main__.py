from envhub.cli.commands import main

main()

SELECT current_database()

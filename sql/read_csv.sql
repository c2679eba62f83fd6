-- A CSV source read with its declared dialect and every column as VARCHAR: no sniffing of the
-- dialect, the header or the types from the data (auto_detect = false, explicit columns).
read_csv({path}, auto_detect = false, header = {header}, delim = {delimiter}, quote = {quote},
         escape = {escape}, nullstr = {nulls}, columns = {columns})

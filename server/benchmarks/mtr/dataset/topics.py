"""The topic bank of the procedural generator: what users ask about and the real answers.

Each topic has facets; a facet is what a user asks (an embedded question that fits "Can you
tell me ...?", "I was wondering if you could tell me ...") and two sentences of a true
answer. A dialogue stays on one topic, so its rounds follow on from one another.
Format of :data:`_BANK`: ``# title`` opens a topic; each line below it is ``ask | answer``,
the answer being two sentences.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Facet:
    ask: str
    facts: tuple[str, str]


@dataclass(frozen=True)
class Topic:
    title: str
    facets: tuple[Facet, ...]


_BANK = """
# volcanoes
how volcanoes form | Volcanoes form where molten rock from deep inside the Earth finds a way up to the surface. Most of them sit along the edges of tectonic plates, where plates pull apart or slide under one another.
why some eruptions are explosive | It mostly depends on how thick the magma is and how much gas it holds. Thick, gassy magma traps pressure until it bursts, while runny magma tends to flow out gently as lava.
what the Ring of Fire is | The Ring of Fire is a horseshoe of volcanoes and earthquake zones around the Pacific Ocean. It holds roughly three quarters of the world's active volcanoes, from Chile to Japan to New Zealand.
how scientists predict eruptions | Scientists watch for small earthquakes, swelling of the ground, and changes in the gases coming out of vents. None of these gives an exact date, but together they often warn people days or weeks ahead.
what the biggest volcano is | Mauna Loa in Hawaii is the largest active volcano on Earth by volume. On Mars, Olympus Mons is far bigger still, about two and a half times the height of Everest.
whether volcanoes are good for anything | Volcanic ash breaks down into some of the most fertile soil in the world. Volcanic heat also powers geothermal plants, which supply much of Iceland's electricity.
what happened at Pompeii | In the year seventy-nine, Mount Vesuvius buried the Roman town of Pompeii under ash and pumice. The ash preserved streets, houses and even loaves of bread, which is why archaeologists learn so much there.

# the Moon
how the Moon formed | The leading idea is that a Mars-sized body crashed into the young Earth about four and a half billion years ago. Debris from that impact gathered in orbit and clumped together to become the Moon.
why we always see the same side of the Moon | The Moon spins exactly once for every trip around the Earth, so the same face always points toward us. This is called tidal locking, and it happened because Earth's gravity slowed the Moon's spin long ago.
why the Moon has phases | The Moon doesn't make its own light; we see the half lit by the Sun. As it moves around us each month, we see more or less of that sunlit half, from new moon to full moon and back.
how far away the Moon is | On average the Moon is about three hundred and eighty-four thousand kilometers away. Light covers that distance in a little over one second.
who has walked on the Moon | Twelve astronauts walked on the Moon, all during NASA's Apollo missions between nineteen sixty-nine and nineteen seventy-two. Neil Armstrong was the first, and Gene Cernan was the last to leave.
what causes a lunar eclipse | A lunar eclipse happens when the Earth passes directly between the Sun and the Moon. The Moon often turns a coppery red, because sunlight bent through Earth's atmosphere still reaches it.
whether there is water on the Moon | Yes, there is water ice in permanently shadowed craters near the Moon's poles. That ice could one day supply drinking water and even rocket fuel for future missions.

# honeybees
how honeybees make honey | Bees collect nectar from flowers and store it in a special honey stomach. Back at the hive they pass it between workers and fan it with their wings until most of the water evaporates.
what the queen bee does | The queen's main job is laying eggs, sometimes well over a thousand a day in summer. She also releases scents that keep the colony calm and working together.
how bees tell each other where flowers are | Forager bees perform a waggle dance on the honeycomb. The angle of the dance shows the direction relative to the Sun, and the length of the waggle shows the distance.
why bees are important for farming | Bees pollinate a large share of the crops we eat, including apples, almonds and many berries. Without them, farmers would get much smaller harvests of many fruits and vegetables.
how long a worker bee lives | A summer worker bee usually lives only about five to six weeks, because foraging wears her out. Bees born in autumn can live for several months, keeping the colony warm through winter.
why bees are in trouble | Bees face a mix of problems, including parasites like the varroa mite, pesticides and the loss of wildflowers. Beekeepers in many countries lose a large share of their colonies each winter.
how a hive stays warm in winter | Honeybees cluster into a tight ball and shiver their flight muscles to make heat. They rotate, so bees on the cold outside take turns moving to the warm center.

# baking sourdough bread
what a sourdough starter is | A starter is a mix of flour and water that wild yeasts and bacteria have colonized. You feed it regularly, and it makes the bread rise while adding that tangy flavor.
how long sourdough takes to make | From mixing to baking it usually takes a day or more, because wild yeast works slowly. Much of that time is just waiting while the dough rises, often overnight in the fridge.
why my loaf might come out flat | A flat loaf usually means a weak starter or dough that rose for too long. Shaping the loaf tightly and using a starter at its peak both help it hold its shape.
why people bake sourdough in a Dutch oven | A covered pot traps steam from the dough during the first part of baking. The moist air keeps the crust soft for longer, so the loaf can expand before the crust sets.
what flour works best | Bread flour with a high protein content gives a strong, chewy structure. Many bakers mix in some whole wheat or rye, which feeds the starter and adds flavor.
how to tell when the bread is done | A finished loaf has a deep brown crust and sounds hollow when you tap the bottom. For certainty, the inside should reach about ninety-five degrees Celsius.
how to keep a starter alive | Keep it in a jar and feed it fresh flour and water, about once a day at room temperature. If you bake less often, you can store it in the fridge and feed it once a week.

# ancient Rome
how Rome was founded | Legend says the twins Romulus and Remus founded Rome in seven hundred fifty-three B C, after being raised by a wolf. Historians think it actually grew from small villages on the hills beside the Tiber river.
how big the Roman Empire got | At its height, around the year one hundred seventeen, the empire stretched from Britain to Egypt and from Spain to Iraq. It held perhaps sixty million people, a large share of everyone alive at the time.
what Roman roads were like | The Romans built over eighty thousand kilometers of paved roads, layered with gravel and fitted stone. Some are still in use today, and they helped armies and trade move quickly across the empire.
how the Colosseum was used | The Colosseum hosted gladiator fights, animal hunts and public executions for the crowds of Rome. It could hold around fifty thousand spectators and had a canvas awning to shade them.
what Romans ate | Ordinary Romans ate a lot of bread, porridge, beans and vegetables, with olive oil and wine. Rich families held long dinners with dishes like stuffed dormice and fish sauce called garum.
why the Western Roman Empire fell | There was no single cause: civil wars, economic trouble and pressure from groups on the borders all played a part. The traditional end date is four seventy-six, when the last western emperor was removed.
how Roman concrete has lasted so long | Roman concrete used volcanic ash and lime, which react with water to form very stable minerals. Some harbor walls have grown stronger over two thousand years in seawater.

# jazz
where jazz started | Jazz grew up in New Orleans in the early twentieth century. It blended blues, ragtime, brass band music and African American church music.
what makes jazz different from other music | The heart of jazz is improvisation, where players invent melodies on the spot. It also leans on swing rhythm and on musicians answering each other's ideas.
who Louis Armstrong was | Louis Armstrong was a trumpeter and singer from New Orleans who made the solo central to jazz. His gravelly voice and joyful style made him one of the most famous musicians in the world.
what bebop is | Bebop is a fast, complex style of jazz that emerged in the nineteen forties. Charlie Parker and Dizzy Gillespie led it, playing intricate melodies over quickly changing chords.
which jazz album I should start with | Kind of Blue by Miles Davis is the best-selling jazz album of all time and a great place to start. It is calm and melodic, and each track is built on just a few simple scales.
how jazz musicians improvise together | Usually the band plays the main tune first, then each player takes a turn soloing over the same chord pattern. The others keep the rhythm and harmony going and react to what the soloist plays.
what a big band is | A big band is a jazz group of about twelve to twenty players, with sections of saxophones, trumpets and trombones. Bands led by Duke Ellington and Count Basie filled dance halls in the nineteen thirties and forties.

# sleep
how much sleep adults need | Most adults need about seven to nine hours of sleep a night. Regularly getting less than that is linked to poorer mood, memory and health.
what happens during REM sleep | REM sleep is the stage when most vivid dreaming happens and the eyes move quickly under the lids. The brain is very active, but the body's large muscles are temporarily relaxed.
why we feel groggy after a nap | If you wake up during deep sleep, you can feel heavy and confused for a while. Keeping naps to about twenty minutes usually avoids reaching that deep stage.
how screens affect sleep | Bright screens late at night can delay the release of melatonin, the hormone that makes us sleepy. Engaging content also keeps the mind alert, which can make it harder to drift off.
what a good bedtime routine looks like | Going to bed and waking up at the same times every day is the single most helpful habit. A cool, dark, quiet room and a wind-down period without screens help too.
whether caffeine really affects sleep | Yes, caffeine blocks a chemical called adenosine that builds up and makes us sleepy. Its effect can last six hours or more, so an afternoon coffee can still disturb sleep.
why we dream | Nobody knows for sure, but dreams may help the brain sort memories and process emotions. Many researchers think dreaming is a side effect of the brain consolidating what we learned during the day.

# coffee
where coffee comes from | Coffee comes from the seeds of a fruit called the coffee cherry, which grows on shrubs in tropical regions. Legend traces its discovery to Ethiopia, and it spread through Yemen and the Middle East.
what the difference between arabica and robusta is | Arabica beans are sweeter and more aromatic, and they make up most specialty coffee. Robusta has a harsher taste and roughly twice as much caffeine, and it is common in instant coffee and espresso blends.
how espresso is made | Espresso is made by forcing hot water through finely ground coffee at high pressure. A shot takes about twenty-five to thirty seconds and has a layer of foam on top called crema.
how much caffeine is in a cup | A typical cup of brewed coffee has around eighty to one hundred milligrams of caffeine. Health agencies suggest most adults keep to about four hundred milligrams a day.
how roasting changes the flavor | Light roasts keep more of the bean's fruity and floral flavors. Darker roasts taste more bitter and smoky, because the sugars caramelize and the oils come to the surface.
how to make good coffee at home | Start with freshly ground beans and water just below boiling. A common ratio is about one gram of coffee to sixteen grams of water.
what cold brew is | Cold brew is coffee steeped in cold water for twelve to twenty-four hours. It comes out smoother and less acidic than hot coffee poured over ice.

# octopuses
how smart octopuses are | Octopuses are among the most intelligent invertebrates, able to solve puzzles and open jars. In aquariums they have been known to escape their tanks and sneak into neighboring ones.
how octopuses change color | Their skin contains thousands of cells filled with pigment, which they can expand or shrink in a fraction of a second. They use this to blend into rocks and coral or to signal their mood.
how many hearts an octopus has | An octopus has three hearts: two pump blood through the gills and one pumps it to the rest of the body. Their blood is blue, because it carries oxygen using copper instead of iron.
how long octopuses live | Most octopuses live only one to two years. Females usually die soon after their eggs hatch, having guarded them without eating.
how an octopus uses its arms | Each arm has its own cluster of nerve cells, so the arms can taste and react somewhat on their own. Their suckers can both grip and taste whatever they touch.
how octopuses defend themselves | They can squirt a cloud of ink to confuse predators and then jet away. Some species mimic more dangerous animals, like lionfish or sea snakes.
what the largest octopus is | The giant Pacific octopus is the largest species, with an arm span that can reach several meters. It lives in the cold waters of the North Pacific.

# coral reefs
what coral actually is | A coral is an animal, a colony of tiny creatures called polyps related to jellyfish. Reef-building corals make hard skeletons of limestone, which pile up over centuries into reefs.
why coral reefs matter | Reefs cover less than one percent of the ocean floor but support about a quarter of all marine species. They also protect coastlines from waves and feed hundreds of millions of people.
what coral bleaching is | When the water gets too warm, corals expel the tiny algae living in their tissues and turn white. If the heat lasts too long the corals starve, because those algae provide most of their food.
how big the Great Barrier Reef is | The Great Barrier Reef off Australia stretches for about two thousand three hundred kilometers. It is made of nearly three thousand separate reefs and can be seen from space.
how fast coral grows | Most reef-building corals grow only a few millimeters to a few centimeters a year. That slow growth is why damaged reefs can take decades to recover.
what lives on a coral reef | Reefs are home to fish like clownfish and parrotfish, as well as turtles, sharks, crabs and sea stars. Parrotfish even grind up coral and turn it into white sand.
how people are helping reefs | Scientists grow coral fragments in underwater nurseries and replant them on damaged reefs. Protected marine areas and cutting pollution also give reefs a better chance to recover.

# black holes
what a black hole is | A black hole is a region where gravity is so strong that nothing, not even light, can escape. It forms when a huge amount of mass is squeezed into a tiny space.
how black holes form | Many form when a very massive star runs out of fuel and its core collapses. Supermassive black holes at the centers of galaxies probably grew by swallowing gas and merging with other black holes.
what the event horizon is | The event horizon is the boundary around a black hole beyond which nothing can return. From outside, anything falling toward it appears to slow down and fade.
whether there is a black hole in our galaxy | Yes, the center of the Milky Way hosts a supermassive black hole called Sagittarius A star. It has about four million times the mass of the Sun.
how we can see a black hole | We can't see the black hole itself, but we can see hot gas swirling around it and stars orbiting it. In twenty nineteen, astronomers released the first image of a black hole's shadow.
what would happen if you fell into one | Near a small black hole, the pull on your feet would be much stronger than on your head, stretching you out. Scientists jokingly call this spaghettification.
whether black holes last forever | Stephen Hawking predicted that black holes slowly lose energy through what is now called Hawking radiation. For large black holes this takes far longer than the current age of the universe.

# the human heart
how the heart pumps blood | The heart has four chambers: two upper ones receive blood and two lower ones pump it out. The right side sends blood to the lungs, and the left side pushes it to the rest of the body.
how many times the heart beats in a day | At a resting rate of around seventy beats a minute, the heart beats about a hundred thousand times a day. Over a lifetime that adds up to more than two and a half billion beats.
what a normal resting heart rate is | For most adults a resting heart rate between sixty and one hundred beats per minute is normal. Well-trained athletes often have rates in the forties or fifties.
what blood pressure numbers mean | The top number is the pressure when the heart beats, and the bottom number is the pressure between beats. A reading below about one twenty over eighty is generally considered healthy.
how exercise helps the heart | Regular exercise strengthens the heart muscle so it pumps more blood with each beat. It also helps lower blood pressure and improves cholesterol levels.
what the warning signs of a heart attack are | Common signs include chest pain or pressure, pain spreading to the arm or jaw, shortness of breath and cold sweats. Anyone with these symptoms should call emergency services right away.
what keeps the heart beating on its own | The heart has its own natural pacemaker, a small cluster of cells called the sinoatrial node. It sends out electrical signals that make the chambers contract in rhythm.

# learning a new language
how long it takes to learn a language | It depends on the language and how much time you put in, but reaching a conversational level usually takes several hundred hours. Languages close to your own, like Spanish for English speakers, tend to come faster.
what the best way to build vocabulary is | Spaced repetition works well: you review words just as you are about to forget them. Learning words in phrases and real sentences also makes them easier to remember.
how to practice speaking | Talking with native speakers, even in short online exchanges, builds confidence quickly. Shadowing, which means repeating audio right after a speaker, also helps your pronunciation.
whether children learn languages faster than adults | Children usually pick up a native-like accent more easily. Adults, though, often learn grammar and vocabulary faster at first, because they can study more systematically.
how to stay motivated | Setting small daily goals, like fifteen minutes a day, works better than occasional long sessions. Using the language for things you enjoy, like shows or music, keeps it fun.
which language is hardest for English speakers | Languages like Japanese, Mandarin, Arabic and Korean usually take English speakers the longest. They have different writing systems and grammar that differ a lot from English.
whether watching films with subtitles helps | Yes, especially with subtitles in the language you are learning. It connects what you hear with what you read and exposes you to natural everyday speech.

# houseplants
which houseplants are easiest to care for | Snake plants, pothos and ZZ plants are very forgiving and cope with low light. They also survive if you forget to water them for a couple of weeks.
how often to water houseplants | Most houseplants like to be watered when the top few centimeters of soil feel dry. Overwatering is the most common way people kill them, because soggy roots rot.
why plant leaves turn yellow | Yellow leaves often mean too much water, but they can also signal too little light or a lack of nutrients. Older lower leaves naturally yellow and drop as the plant grows.
how much light houseplants need | Many popular houseplants like bright but indirect light, near a window without harsh midday sun. Cacti and succulents want as much direct sun as you can give them.
whether plants really clean the air | Houseplants do absorb some pollutants, but you would need a huge number to match a window or a fan. Their real benefits are more about mood and a nicer room.
when to repot a plant | Repot when roots grow out of the drainage holes or circle the inside of the pot. Spring is usually the best time, because the plant is starting to grow actively.
how to deal with pests on houseplants | Wiping leaves with soapy water or neem oil removes many common pests like spider mites and aphids. Isolating an infested plant keeps the bugs from spreading to the others.

# running a first marathon
how long to train for a marathon | Most beginner plans run for about sixteen to twenty weeks. It helps to be able to run comfortably for about half an hour before you start.
how long the longest training run should be | Many plans build up to a longest run of about thirty to thirty-five kilometers, around three weeks before race day. After that you taper, cutting back so your legs are fresh.
what to eat before a marathon | In the last two or three days, eat more carbohydrates like pasta, rice and bread to fill your energy stores. On race morning, eat a familiar breakfast about three hours before the start.
what hitting the wall means | Hitting the wall is a sudden loss of energy, often around thirty kilometers in, when the body runs low on stored carbohydrate. Taking in gels or sports drinks during the race helps prevent it.
how fast a beginner should run | Most of your training should be at an easy pace where you can still hold a conversation. On race day, starting slower than you feel like running pays off in the second half.
how to avoid injuries while training | Increase your weekly distance gradually, roughly ten percent at a time, and take rest days seriously. Good shoes and some strength training for the hips and legs help a lot.
why a marathon is forty-two kilometers | The distance was fixed at forty-two point one nine five kilometers after the nineteen oh eight London Olympics. The course was set to run from Windsor Castle to the royal box in the stadium.

# the Eiffel Tower
when the Eiffel Tower was built | The Eiffel Tower was built for the World's Fair of eighteen eighty-nine in Paris. It took just over two years to assemble its eighteen thousand iron parts.
how tall the Eiffel Tower is | Including its antennas, the tower is about three hundred thirty meters tall. It was the tallest man-made structure in the world for about forty years.
what people thought of it at first | Many artists and writers at the time called it ugly and signed a public protest against it. It was only meant to stand for twenty years, but it proved useful as a radio antenna.
how many steps it has | There are six hundred seventy-four steps from the ground to the second floor, which visitors can climb. To reach the top you take an elevator.
whether the tower changes size | Yes, the iron expands in summer heat, so the top can grow by up to about fifteen centimeters. It also sways slightly in strong winds.
how often the tower is painted | The tower is repainted about every seven years, which takes around sixty tons of paint. The color is a special bronze shade that is slightly darker at the bottom.
how many people visit it | Around six to seven million people visit the tower each year. It is one of the most visited paid monuments in the world.

# chess
how chess started | Chess grew out of an Indian game called chaturanga around the sixth century. It spread through Persia and the Arab world to Europe, where the queen became the most powerful piece.
how the pieces move | The rook moves in straight lines, the bishop diagonally, and the queen in both directions. The knight jumps in an L shape, and pawns move forward one square but capture diagonally.
what the best opening move for beginners is | Moving the king's pawn or queen's pawn two squares is a classic start. It opens lines for your pieces and helps you control the center of the board.
what castling is | Castling is a special move where the king moves two squares toward a rook, and the rook jumps over to the other side. It tucks the king away safely and brings the rook into play.
how computers got so good at chess | In nineteen ninety-seven, IBM's Deep Blue beat world champion Garry Kasparov using enormous search power. Modern engines now evaluate positions far better than any human.
how to get better at chess | Solving tactics puzzles every day is one of the fastest ways to improve. Reviewing your own games to find your mistakes helps just as much.
what a stalemate is | A stalemate happens when the player to move has no legal moves but is not in check. The game ends in a draw, which can rescue a player who is losing.

# tea
where tea comes from | All true tea comes from one plant, Camellia sinensis, first used in southwest China. Green, black, white and oolong teas are made from the same leaves, processed differently.
what makes green tea different from black tea | Green tea leaves are heated soon after picking, which stops them from oxidizing. Black tea leaves are allowed to oxidize fully, which darkens them and gives a stronger flavor.
how to brew green tea properly | Use water well below boiling, around seventy to eighty degrees Celsius. Steep it for only two or three minutes, or it turns bitter.
how much caffeine tea has | A cup of black tea usually has about forty to seventy milligrams of caffeine, roughly half as much as coffee. Green tea usually has a little less.
what herbal tea is | Herbal teas like chamomile and peppermint are not made from the tea plant at all. They are infusions of other leaves, flowers or roots, and most contain no caffeine.
how tea became popular in Britain | Tea became fashionable in England in the sixteen sixties, helped by Queen Catherine of Braganza. By the nineteenth century, afternoon tea had become a social ritual.
what matcha is | Matcha is green tea ground into a fine powder and whisked into water. Since you drink the whole leaf, it has more caffeine and a rich, grassy taste.

# dinosaurs
when dinosaurs lived | Dinosaurs appeared about two hundred thirty million years ago and dominated the land for over a hundred and fifty million years. The non-bird dinosaurs died out about sixty-six million years ago.
what killed the dinosaurs | Most scientists agree that a large asteroid hit what is now Mexico's Yucatan peninsula. The impact threw dust into the sky, cooled the climate and collapsed food chains.
whether birds are dinosaurs | Yes, birds evolved from small feathered dinosaurs, so scientists consider them living dinosaurs. A chicken is more closely related to a Tyrannosaurus than a Tyrannosaurus is to a Stegosaurus.
what the biggest dinosaur was | The largest were long-necked plant eaters like Argentinosaurus, which may have weighed seventy tons or more. It was probably over thirty meters long.
how we know what dinosaurs looked like | Scientists work from fossil bones, footprints and sometimes skin impressions. A few fossils even preserve pigment cells in feathers, revealing original colors.
whether T rex was fast | Studies suggest an adult Tyrannosaurus could not really run and probably walked at most about twenty kilometers an hour. Its huge weight made fast running risky for its legs.
how fossils form | Fossils usually form when an animal is buried quickly in mud or sand. Over millions of years, minerals replace the bone and turn it into stone.

# rainbows
how rainbows form | A rainbow appears when sunlight enters raindrops, bends, reflects off the back of the drop and bends again on the way out. Each color bends by a slightly different amount, which spreads the light into bands.
why rainbows are curved | Each color reaches your eye from drops at a fixed angle of about forty-two degrees from the point opposite the Sun. All the drops at that angle form a circle, and the ground usually hides the bottom half.
what a double rainbow is | A second, fainter rainbow appears when light reflects twice inside the raindrops. Its colors are reversed, with red on the inside instead of the outside.
when you are most likely to see a rainbow | Look for rainbows when the Sun is low behind you and rain is falling in front of you. Early morning and late afternoon after a shower are the best times.
whether you can reach the end of a rainbow | No, a rainbow isn't a physical object in one place. It moves as you move, because it depends on the angle between you, the Sun and the drops.
how many colors a rainbow has | A rainbow is actually a continuous spread of colors. The traditional seven, red, orange, yellow, green, blue, indigo and violet, were chosen by Isaac Newton.
what a moonbow is | A moonbow is a rainbow made by moonlight instead of sunlight. It is much fainter and usually looks white to our eyes, because our color vision weakens in dim light.

# electric cars
how electric cars work | An electric car stores energy in a large battery and uses it to drive one or more electric motors. It has far fewer moving parts than a petrol car, with no gearbox or exhaust.
how far an electric car can go on one charge | Most new electric cars manage somewhere between three hundred and five hundred kilometers on a full charge. Cold weather and fast motorway driving reduce the range.
how long charging takes | At a home charger, a full charge usually takes overnight, about six to twelve hours. A fast charger on the motorway can add a few hundred kilometers in around half an hour.
whether electric cars are cheaper to run | Electricity usually costs less per kilometer than petrol, especially when charging at home. They also need less maintenance, since there are no oil changes.
how long the batteries last | Modern batteries typically keep most of their capacity for well over ten years. Many makers guarantee the battery for about eight years or a hundred and sixty thousand kilometers.
what regenerative braking is | When you slow down, the motor acts as a generator and puts energy back into the battery. This extends the range and means the brake pads wear much more slowly.
whether electric cars are really greener | Making the battery creates extra emissions at first. Over its life, though, an electric car usually produces far less carbon dioxide than a petrol car, especially on clean electricity.

# the Amazon rainforest
how big the Amazon rainforest is | The Amazon covers about five and a half million square kilometers across nine countries. Around sixty percent of it lies in Brazil.
how many species live there | The Amazon holds about one in ten of all known species on Earth. Scientists still describe new plants and animals there every year.
how long the Amazon river is | The Amazon river runs for about six and a half thousand kilometers. It carries more water than any other river, about a fifth of all river water entering the oceans.
why the rainforest matters for the climate | The forest stores huge amounts of carbon in its trees and soil. It also releases moisture that forms rain clouds, which water farms far beyond the forest.
what is causing deforestation | Most clearing is for cattle pasture, followed by farming like soy, as well as logging and mining. Roads into the forest make it easier for clearing to spread.
who lives in the Amazon | Around thirty million people live in the Amazon region, including hundreds of Indigenous groups. Some groups have little or no contact with the outside world.
what the most dangerous animal there is | Jaguars and anacondas get the attention, but mosquitoes that spread disease are the real danger to people. The poison dart frog is also famous, as its skin carries a powerful toxin.

# photography
what aperture does | The aperture is the opening in the lens that lets light in. A wide aperture gives a blurry background, while a narrow one keeps more of the scene sharp.
how shutter speed affects a photo | Shutter speed is how long the sensor is exposed to light. A fast shutter freezes motion, and a slow one blurs it, which is great for waterfalls.
what the rule of thirds is | Imagine the frame divided by two horizontal and two vertical lines. Placing your subject along those lines or where they cross usually makes a more balanced picture.
when the best light for photos is | The hour after sunrise and before sunset, called golden hour, gives soft, warm light. Harsh midday sun creates strong shadows that are hard to work with.
what ISO means | ISO controls how sensitive the sensor is to light. A higher ISO helps in the dark but adds grainy noise to the image.
how to take sharper photos | Hold the camera steady, use a fast enough shutter speed, and make sure the focus point is on your subject. A tripod helps a lot in low light.
whether you need an expensive camera | Not really: modern phone cameras take excellent photos in good light. Learning about light and composition makes a much bigger difference than gear.

# composting
how composting works | Microbes, fungi and small creatures like worms break down food scraps and garden waste into rich soil. The process needs air, moisture and a mix of materials.
what you can put in a compost bin | Fruit and vegetable scraps, coffee grounds, eggshells, leaves and grass clippings all compost well. Avoid meat, dairy and oily food, which smell and attract pests.
what greens and browns are | Greens are moist, nitrogen-rich materials like food scraps and fresh grass. Browns are dry, carbon-rich materials like leaves, cardboard and straw, and a good pile has more browns than greens.
how long compost takes | A well-managed hot pile can be ready in about two or three months. A cold pile that you just leave alone may take a year or more.
why my compost smells bad | A bad smell usually means the pile is too wet or has too many greens. Mixing in dry browns and turning the pile to add air usually fixes it.
how worm composting works | Worm bins use red wigglers, which eat food scraps and leave behind rich castings. They work well indoors or on a balcony, since they don't smell when managed properly.
why composting helps the environment | Food waste in landfills rots without air and gives off methane, a strong greenhouse gas. Composting avoids that and returns nutrients to the soil.

# the printing press
who invented the printing press | Johannes Gutenberg developed a printing press with movable metal type in Mainz, Germany, around fourteen forty. Printing from carved blocks already existed in China and Korea much earlier.
what the Gutenberg Bible is | The Gutenberg Bible, finished around fourteen fifty-five, was the first major book printed with movable type in Europe. About fifty copies survive, and they are among the most valuable books in the world.
how the printing press changed Europe | Books became far cheaper and spread much faster, so more people learned to read. It helped fuel the Reformation and the Scientific Revolution by spreading new ideas.
how movable type worked | Each letter was cast as a small metal block, and printers arranged them into lines and pages. After printing, the letters could be taken apart and reused for the next page.
how fast early presses were | An early press could print a few hundred pages a day, compared with a few pages for a scribe copying by hand. By fifteen hundred, millions of books had been printed in Europe.
what came after the hand press | In the eighteen hundreds, steam-powered presses printed thousands of pages an hour. That made daily newspapers cheap enough for almost everyone.
how paper was made back then | Paper in Gutenberg's time was made from old linen and cotton rags, beaten into pulp. Wood-pulp paper only became common in the eighteen hundreds.

# penguins
where penguins live | Almost all penguins live in the Southern Hemisphere, from Antarctica to South America, Africa and Australia. The Galapagos penguin lives right on the equator.
how penguins stay warm | Penguins have dense, overlapping feathers and a thick layer of fat. Emperor penguins also huddle in large groups, taking turns on the cold outside.
how deep penguins can dive | Emperor penguins can dive over five hundred meters deep and hold their breath for more than twenty minutes. They are the deepest diving birds.
how emperor penguins raise their chicks | The female lays a single egg and passes it to the male, who keeps it on his feet for about two months. He fasts through the Antarctic winter until the chick hatches.
why penguins can't fly | Over millions of years, their wings became stiff flippers that are perfect for swimming. Diving and flying need very different wings, and penguins specialized in the water.
what the smallest penguin is | The little penguin, found in southern Australia and New Zealand, stands only about thirty centimeters tall. In some places tourists watch them waddle ashore at dusk.
what penguins eat | Penguins eat fish, squid and small shrimp-like creatures called krill. They swallow their food whole, and spines on their tongues help them grip slippery prey.

# earthquakes
what causes earthquakes | Earthquakes happen when rocks along a fault suddenly slip past each other, releasing built-up stress. Most occur along the boundaries of tectonic plates.
how earthquakes are measured | Scientists use the moment magnitude scale, where each whole number means about thirty-two times more energy. Seismometers around the world record the shaking.
what to do during an earthquake | The standard advice is drop, cover and hold on: get down, shelter under a sturdy table and hold on. Stay away from windows, and don't run outside while the ground is shaking.
what the biggest recorded earthquake was | The strongest recorded earthquake struck Chile in nineteen sixty, with a magnitude of about nine and a half. It caused a tsunami that crossed the Pacific to Hawaii and Japan.
whether earthquakes can be predicted | No one can predict the exact time and place of an earthquake. Scientists can estimate the chances in a region, and some countries send alerts seconds before strong shaking arrives.
what an aftershock is | Aftershocks are smaller earthquakes that follow a large one, as the surrounding rock adjusts. They can continue for weeks or even years.
how buildings survive earthquakes | Engineers use flexible frames, strong connections and sometimes base isolators that let a building move separately from the ground. Japan and Chile have some of the strictest building codes.

# vitamins
what vitamins actually do | Vitamins are small nutrients the body needs to make energy, repair tissue and keep the immune system working. The body cannot make most of them, so they have to come from food.
where vitamin D comes from | Your skin makes vitamin D when it is exposed to sunlight. It is also found in oily fish and eggs, and many people take a supplement in winter.
what vitamin C is good for | Vitamin C helps the body heal wounds and absorb iron, and it supports the immune system. Citrus fruit, peppers, strawberries and broccoli are good sources.
whether people need vitamin supplements | Most people who eat a varied diet get enough vitamins from food. Supplements help specific groups, like vitamin D in dark winters or B12 for vegans.
what happens if you get too little vitamin C | A long shortage causes scurvy, with bleeding gums and slow healing. Sailors once suffered from it until citrus fruit was added to their rations.
whether you can take too many vitamins | Yes, especially the fat-soluble ones like vitamins A and D, which build up in the body. Very high doses can cause serious side effects.
why vitamin B12 matters | Vitamin B12 keeps nerves healthy and helps make red blood cells. It comes almost only from animal foods, so vegans usually need fortified foods or supplements.

# the Olympic Games
when the Olympics started | The ancient Olympic Games began in Greece in seven seventy-six B C, held in honor of Zeus at Olympia. The modern Games were revived in Athens in eighteen ninety-six.
what the Olympic rings mean | The five interlocking rings represent the union of the five inhabited continents. At least one of the colors, with the white background, appears in every nation's flag.
how the host city is chosen | The International Olympic Committee chooses the host, usually about seven years in advance. Cities present plans for venues, transport and housing athletes.
who has won the most Olympic medals | American swimmer Michael Phelps has won twenty-eight Olympic medals, twenty-three of them gold. Both are records by a wide margin.
how the Olympic flame works | The flame is lit in Olympia, Greece, using sunlight focused by a curved mirror. A relay of torchbearers then carries it to the host city for the opening ceremony.
when the Winter Olympics began | The first Winter Olympics were held in Chamonix, France, in nineteen twenty-four. Since nineteen ninety-four they have taken place two years apart from the Summer Games.
what sports were in the ancient Games | The ancient Games featured running, wrestling, boxing, chariot racing and the pentathlon. Athletes competed naked, and winners received an olive wreath.

# whales
how big a blue whale is | The blue whale is the largest animal that has ever lived, reaching about thirty meters long. Its heart alone is about the size of a small car.
how whales breathe | Whales breathe air through blowholes on top of their heads. Some can hold their breath for over an hour on deep dives.
how whales communicate | Many whales communicate with sound, from clicks and whistles to long songs. Humpback whale songs can last for hours and change from year to year.
what baleen is | Baleen is a set of flexible plates in the mouths of some whales, made of the same material as fingernails. They gulp seawater and strain out small animals like krill.
how far whales migrate | Gray whales travel up to about twenty thousand kilometers a year between Arctic feeding grounds and lagoons in Mexico. That is one of the longest migrations of any mammal.
how long whales live | Bowhead whales can live for over two hundred years, the longest of any mammal. Most large whales live for several decades.
how killer whales hunt | Killer whales hunt in family groups and use different techniques depending on the prey. Some make waves to knock seals off ice floes.

# budgeting
how to start a budget | Begin by writing down your monthly income and tracking every expense for a month. Then sort the spending into needs, wants and savings.
what the fifty thirty twenty rule is | The rule suggests spending about fifty percent of income on needs, thirty on wants and twenty on savings or paying off debt. It's a simple starting point you can adjust.
how big an emergency fund should be | A common goal is enough to cover three to six months of essential expenses. Even a small fund helps you avoid expensive debt when something goes wrong.
how to pay off debt faster | One approach is to pay the debt with the highest interest rate first, which saves the most money. Another is to clear the smallest balance first for a quick motivating win.
how to cut everyday spending | Cancel subscriptions you don't use, plan meals before shopping and wait a day before impulse purchases. Small savings add up quickly over a year.
why compound interest matters | Compound interest means you earn interest on your interest, so savings grow faster over time. Starting early makes a big difference because the growth keeps building.
whether to use a budgeting app | Apps can track spending automatically and show where your money goes. A simple spreadsheet works just as well if you review it regularly.

# the water cycle
what the water cycle is | The water cycle is the continuous movement of water between the oceans, the air and the land. Water evaporates, forms clouds, falls as rain or snow and flows back to the sea.
how clouds form | Warm air carrying water vapor rises and cools as it goes up. The vapor condenses into tiny droplets around specks of dust, and together they make a cloud.
how much of Earth's water is fresh | Only about two and a half percent of Earth's water is fresh, and most of that is frozen in ice caps and glaciers. Less than one percent is easy for us to reach.
how long water stays in the atmosphere | A water molecule stays in the air for only about nine days on average. In the deep ocean, it can stay for thousands of years.
what drives the water cycle | The Sun's energy drives evaporation, and gravity pulls the water back down as rain and rivers. Plants also add water to the air through their leaves.
why rain is fresh when the sea is salty | When water evaporates, the salt stays behind in the ocean. So the vapor that forms clouds is fresh water.
what groundwater is | Groundwater is rain that has soaked into the soil and collected in cracks and pores in rock. It supplies drinking water for billions of people through wells and springs.

# bicycles
when the bicycle was invented | The first two-wheeled machine, pushed along with the feet, appeared in Germany in eighteen seventeen. The modern safety bicycle with a chain drive came in the eighteen eighties.
how to choose the right bike size | The right size lets you stand over the frame with a little clearance and reach the handlebars comfortably. Most shops can fit you in a few minutes.
why bicycles stay upright | A moving bicycle stays up mainly because the rider steers into any lean, bringing the wheels back under them. The front wheel's geometry helps the bike steer itself a little too.
how to fix a flat tire | Take the wheel off, remove the tire with levers and find the hole in the inner tube. You can patch the hole or fit a new tube, then pump it back up.
how cycling helps your health | Cycling strengthens the heart, lungs and leg muscles while being gentle on the joints. Regular riders also tend to sleep better and feel less stressed.
which country cycles the most | The Netherlands has more bicycles than people, and about a quarter of all trips there are made by bike. Its cities are built with separate, safe cycle lanes.
how gears on a bike work | Gears change how far the bike moves with each turn of the pedals. Low gears make climbing hills easier, and high gears let you go faster on the flat.

# cheese
how cheese is made | Milk is curdled with an enzyme called rennet or with acid, splitting it into solid curds and liquid whey. The curds are drained, salted and pressed, and many cheeses are then aged.
why some cheeses have holes | The holes in cheeses like Emmental come from gas released by bacteria during aging. Tiny bits of hay in the milk also help the bubbles form.
what makes blue cheese blue | Blue cheeses are made with a mold called Penicillium, and cheesemakers pierce them with needles to let in air. The mold grows along those channels and gives the blue veins.
how long cheese can be aged | Fresh cheeses like ricotta are eaten within days, while hard cheeses like Parmesan are aged for one to three years. Longer aging makes cheese drier and more intense.
why aged cheese is easier for some people to digest | Most of the milk sugar, lactose, is removed with the whey or broken down during aging. That is why many people with lactose intolerance can eat hard aged cheeses.
how Parmesan gets its name | Parmigiano Reggiano comes from a small area around Parma and Reggio Emilia in northern Italy. Only cheese made there by strict rules can carry the name.
how to store cheese | Wrap cheese in wax paper or special cheese paper, then keep it in the fridge's vegetable drawer. Plastic wrap traps moisture and can make it taste off.

# the pyramids of Egypt
when the pyramids were built | The Great Pyramid of Giza was built around twenty-five sixty B C for the pharaoh Khufu. It was the tallest man-made structure in the world for nearly four thousand years.
how the pyramids were built | Workers cut limestone blocks, moved them on sledges and probably used ramps to raise them. Wetting the sand in front of the sledges made them much easier to pull.
who built the pyramids | The builders were paid Egyptian workers, not slaves, according to evidence from their nearby villages. Teams of skilled laborers were fed bread and beer, and farmers joined during the flood season.
why the pyramids were built | Pyramids were tombs for pharaohs, built to protect the body and help the king reach the afterlife. Treasures and supplies were buried with them for the journey.
how many blocks the Great Pyramid has | The Great Pyramid contains about two point three million stone blocks. Many weigh more than two tons, and some granite blocks inside weigh far more.
what the Sphinx is | The Great Sphinx is a huge limestone statue with a lion's body and a human head, next to the Giza pyramids. Many scholars think the face represents the pharaoh Khafre.
whether the pyramids have hidden rooms | In twenty seventeen, scientists used particles from space called muons to find a large empty space inside the Great Pyramid. Its purpose is still unknown.

# mushrooms
what a mushroom actually is | A mushroom is just the fruiting body of a fungus, like an apple on a tree. Most of the organism is a hidden network of threads called mycelium in the soil or wood.
whether fungi are plants | No, fungi are their own kingdom and are actually closer to animals than to plants. They can't make food from sunlight, so they absorb nutrients from their surroundings.
how fungi help forests | Many fungi connect to tree roots and trade water and minerals for sugar from the tree. They also break down dead wood and leaves, recycling nutrients.
whether it's safe to pick wild mushrooms | Only if you are absolutely sure of the species, because some deadly mushrooms look like edible ones. The death cap causes most fatal mushroom poisonings worldwide.
what the largest living organism is | A honey fungus in Oregon covers about nine square kilometers underground. It may be thousands of years old, making it one of the largest organisms on Earth.
how mushrooms are grown commercially | Growers spread mushroom spawn on a prepared material like compost, straw or sawdust. They keep it dark, cool and humid until the mushrooms sprout.
how penicillin came from a fungus | In nineteen twenty-eight, Alexander Fleming noticed that a Penicillium mold killed bacteria in a dish. That discovery led to penicillin, the first widely used antibiotic.

# solar power
how solar panels make electricity | Solar panels are made of cells, usually silicon, that release electrons when sunlight hits them. That flow of electrons is an electric current.
whether solar panels work on cloudy days | Yes, but they produce less, often somewhere between ten and twenty-five percent of their normal output. Germany and Britain still generate plenty of solar power despite cloudy skies.
how long solar panels last | Most panels last twenty-five to thirty years and slowly lose a little efficiency each year. Many come with a warranty of about twenty-five years.
how much solar power costs now | The price of solar panels has fallen by about ninety percent since twenty ten. In many places it is now one of the cheapest ways to make electricity.
what happens at night | Panels stop producing at night, so homes draw power from the grid or from a battery. Batteries store extra daytime energy for the evening.
which way solar panels should face | In the Northern Hemisphere, panels facing south get the most sun. East and west facing panels still work and spread production over the day.
what a solar farm is | A solar farm is a large field of panels that feeds power straight into the grid. The biggest ones cover many square kilometers and can power hundreds of thousands of homes.

# hiking safety
what to pack for a day hike | Bring plenty of water, snacks, a map, a rain jacket and a warm layer. A small first aid kit and a charged phone are worth carrying too.
how to avoid getting lost | Study the route before you go and carry a map, even if you have an app. Tell someone where you are going and when you expect to be back.
what to do if you meet a bear | Stay calm, don't run, and back away slowly while talking in a low voice. In bear country, carry bear spray and store food away from your tent.
how to prevent blisters | Wear well-fitted boots that you've broken in, and use wool or synthetic socks instead of cotton. Treat any hot spot with tape right away, before it turns into a blister.
how much water to bring | A rough guide is about half a liter for every hour of moderate hiking. Hot weather and steep climbs can easily double that.
what to do if a storm comes | Get off ridges and summits, and stay away from tall isolated trees. If you hear thunder, you are close enough to be struck by lightning.
how to tell if someone has heat exhaustion | Signs include heavy sweating, dizziness, headache, nausea and cool clammy skin. Move them to shade, give them water and let them rest.

# the piano
when the piano was invented | Bartolomeo Cristofori invented the piano in Florence around the year seventeen hundred. Unlike the harpsichord, it could play both soft and loud, hence its full name, the pianoforte.
how a piano makes sound | Pressing a key makes a felt hammer strike strings inside the piano. The vibrating strings pass their energy to a large wooden soundboard that amplifies the sound.
how many keys a piano has | A standard piano has eighty-eight keys: fifty-two white and thirty-six black. They cover just over seven octaves.
how long it takes to learn the piano | Most beginners can play simple songs within a few months of regular practice. Getting to an advanced level usually takes many years.
what the pedals do | The right pedal lets the strings keep ringing after you release the keys. The left pedal softens the sound, and the middle one varies between pianos.
how often a piano should be tuned | Most pianos should be tuned once or twice a year. Changes in temperature and humidity slowly pull the strings out of tune.
whether a digital piano is good for beginners | A good digital piano with weighted keys is a fine choice for beginners. It never needs tuning, and you can practice quietly with headphones.

# memory
how memories are formed | When you learn something, connections between nerve cells are strengthened. A region called the hippocampus helps turn new experiences into long-term memories.
why we forget things | Many memories fade if they are not used, and new information can interfere with old. Forgetting also helps the brain focus on what matters.
how sleep helps memory | During sleep, the brain replays and strengthens what you learned during the day. Students who sleep after studying usually remember more than those who stay up.
what the best way to study is | Testing yourself works better than rereading notes. Spreading study sessions over several days also helps information stick.
what short-term memory is | Short-term memory holds a small amount of information for a few seconds. Most people can keep about four to seven items in mind at once.
how memory champions remember so much | Many use the memory palace technique, placing vivid images along a familiar route in their mind. To recall, they walk through the route again.
whether memory gets worse with age | Some things, like recalling names quickly, get harder with age. Knowledge and vocabulary often stay strong or even improve, and staying active helps.

# tides
what causes tides | Tides are caused mainly by the Moon's gravity pulling on the oceans. The Sun has an effect too, about half as strong as the Moon's.
why there are two high tides a day | The Moon's pull creates a bulge of water on the side facing it and another on the opposite side. As the Earth rotates through both bulges, most coasts get two high tides a day.
what spring tides are | Spring tides happen around the new and full moon, when the Sun and Moon line up. Their pulls combine, so high tides are higher and low tides lower.
where the biggest tides are | The Bay of Fundy in Canada has the largest tidal range in the world, up to about sixteen meters. Its shape funnels and amplifies the incoming water.
whether tides can make electricity | Yes, tidal power stations use the rising and falling water to turn turbines. The La Rance station in France has run since nineteen sixty-six.
what a tide pool is | Tide pools are small pools of seawater left behind on rocky shores at low tide. They are full of life like crabs, anemones, snails and sea stars.
whether tides are getting longer days | Tidal friction is very slowly slowing the Earth's spin, lengthening the day by about two milliseconds per century. At the same time, the Moon drifts about four centimeters farther away each year.

# glaciers
how glaciers form | Glaciers form where more snow falls each winter than melts in summer. Over years the snow is compressed into dense ice that slowly flows downhill.
how fast glaciers move | Most glaciers move a few centimeters to a few meters a day. Some fast glaciers in Greenland can move over thirty meters a day.
why glacier ice looks blue | Dense glacier ice absorbs red light and lets blue light pass through and scatter. The thicker and purer the ice, the deeper the blue.
how much water is stored in glaciers | Glaciers and ice sheets hold about two thirds of the world's fresh water. If all of it melted, sea levels would rise by about seventy meters.
how glaciers shape the land | Glaciers grind rock as they move, carving U-shaped valleys, sharp peaks and deep lakes. Norway's fjords are valleys carved by glaciers and then flooded by the sea.
why glaciers are shrinking | Rising temperatures make glaciers lose more ice each summer than they gain in winter. Most mountain glaciers around the world are retreating.
what an iceberg is | An iceberg is a chunk of ice that breaks off a glacier or ice shelf into the sea. Only about a tenth of it shows above the water.

# the Internet
how the Internet started | The Internet grew out of ARPANET, a US research network that sent its first message in nineteen sixty-nine. It connected universities and let computers share data.
what the difference between the Internet and the web is | The Internet is the global network of connected computers. The World Wide Web is one service on top of it, a system of linked pages invented by Tim Berners-Lee in nineteen eighty-nine.
how data travels across the Internet | Data is split into small packets, each labeled with where it is going. The packets can take different routes and are put back together at the other end.
how undersea cables carry the Internet | Most international traffic travels through fiber optic cables laid on the ocean floor. There are hundreds of them, carrying data as pulses of light.
what an IP address is | An IP address is a number that identifies a device on the network, like a postal address. Domain names like example dot com are translated into IP addresses behind the scenes.
how Wi-Fi works | Wi-Fi uses radio waves to carry data between your device and a router. The router connects to the wider Internet through a cable or fiber line.
how to stay safe online | Use a different strong password for each account and turn on two-step verification. Be careful with links in unexpected messages, which are a common trick.

# bird migration
why birds migrate | Birds migrate to follow food and good breeding conditions as the seasons change. Long summer days in the north offer plenty of insects to feed chicks.
how birds find their way | Birds navigate using the Sun, the stars, the Earth's magnetic field and familiar landmarks. Some may even use smell to find their way.
which bird migrates the farthest | The Arctic tern flies from the Arctic to the Antarctic and back each year. Over its life, it may travel the distance to the Moon and back several times.
how birds prepare for migration | Before leaving, many birds eat heavily and can nearly double their body weight with fat. That fat is the fuel for long flights without stopping.
whether birds migrate at night | Many small songbirds migrate at night, when the air is calmer and cooler. They rest and feed during the day.
why birds fly in a V shape | Flying in a V lets each bird catch rising air from the wingtip of the bird ahead. This saves energy, and the birds take turns at the tiring front position.
how climate change affects migration | Warmer springs are shifting the timing of food like insects. Some birds now arrive too late for the peak of food their chicks need.
"""


_SENTENCE_BREAK = re.compile(r"(?<=[.?!])\s+(?=[A-Z])")


def _parse(text: str) -> tuple[Topic, ...]:
    topics: list[Topic] = []
    title: str | None = None
    facets: list[Facet] = []
    for raw in text.strip().splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("# "):
            if title is not None:
                topics.append(Topic(title, tuple(facets)))
            title, facets = line[2:].strip(), []
            continue
        ask, answer = (p.strip() for p in line.split(" | "))
        a, b = _SENTENCE_BREAK.split(answer)
        facets.append(Facet(ask, (a, b)))
    if title is not None:
        topics.append(Topic(title, tuple(facets)))
    return tuple(topics)


TOPICS: tuple[Topic, ...] = _parse(_BANK)
